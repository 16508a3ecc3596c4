"""The repository keeps its promises: CI runs the README's test command, torch is pinned, no shared data is
committed."""

import re
import subprocess
from pathlib import Path

from bert_core.paths import REPO_ROOT, shared_data_dir
from tests.script_loading import load_script


def readme_commands() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"```(?:bash|sh)\n(.*?)```", text, flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_ci_runs_the_readme_test_command_verbatim():
    test_cmds = [c for c in readme_commands() if "pytest" in c and "pip install" in c]
    assert len(test_cmds) == 1, test_cmds
    ci_lines = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_cmds[0] in ci_lines


def test_readme_app_command_installs_runtime_requirements_and_runs_the_app():
    app_cmds = [c for c in readme_commands() if "streamlit run app.py" in c and "pip install" in c]
    assert len(app_cmds) == 1 and "requirements.txt" in app_cmds[0]


def test_torch_is_pinned_to_a_cpu_installable_release():
    lines = (REPO_ROOT / "requirements.txt").read_text().splitlines()
    assert "torch==2.13.0" in lines
    assert not any(line.startswith("transformers") for line in lines), "transformers is a test-only dependency"


def test_no_shared_data_file_is_committed():
    shared = shared_data_dir()
    if shared is None:
        return
    tracked = subprocess.run(["git", "ls-files", "-s"], cwd=REPO_ROOT, capture_output=True, text=True).stdout
    hashes = {line.split()[1] for line in tracked.splitlines() if line}
    for f in Path(shared).rglob("*"):
        if f.is_file() and f.name != "README.md":
            h = subprocess.run(["git", "hash-object", str(f)], capture_output=True, text=True).stdout.strip()
            assert h not in hashes, f"{f} is committed; read it from ../shared/data instead"


def test_the_space_image_starts_in_public_mode():
    from bert_core.serve.app_storage import PUBLIC_ENV

    env_lines = [line for line in (REPO_ROOT / "Dockerfile").read_text().splitlines() if line.startswith("ENV ")]
    assert any(f"{PUBLIC_ENV}=1" in line.split() for line in env_lines), env_lines


def test_the_docs_name_every_server_setting():
    """The settings table lives in docs/deployment.md; the README points to it."""
    from bert_core.app import app_state
    from bert_core.serve import app_storage, job_base, jobs, model_sources

    names = {v for m in (app_state, app_storage, jobs, model_sources) for k, v in vars(m).items()
             if k.endswith("_ENV") and isinstance(v, str) and v.startswith("BERT_EXPLORER_")}
    # Test-only and tuning knobs documented elsewhere in the README or docs are not server settings.
    names -= {model_sources.CHECKPOINT_ENV, job_base.THREADS_ENV, app_state.POLL_ENV, jobs.PROCESS_ENV}
    docs = "\n".join((REPO_ROOT / name).read_text() for name in ("README.md", "docs/deployment.md"))
    assert names and all(f"`{n}`" in docs for n in names), sorted(n for n in names if f"`{n}`" not in docs)


def test_the_readme_is_a_door_not_a_textbook():
    """What a newcomer needs first stays in the README; the rest lives in docs/, which it links."""
    lines = (REPO_ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines; move the detail into docs/"


def relative_links(markdown: str) -> list[str]:
    """The targets of [text](target) links that point into the repository (code spans and blocks left out)."""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    targets = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", prose)
    return [t for t in targets if not re.match(r"(?i)(https?:|mailto:|#)", t)]


def test_every_relative_link_in_the_readme_and_docs_points_to_a_file():
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in relative_links(page.read_text()):
            path = target.split("#", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(REPO_ROOT)}: {target}")
    assert not broken, broken


def test_the_link_check_sees_links_and_skips_the_web():
    text = "[a](docs/x.md) ![b](y.png) [c](z.md#part) [d](https://e.org) [e](mailto:f@g.h) [f](#here) `[g](no.md)`"
    assert relative_links(text) == ["docs/x.md", "y.png", "z.md#part"]


def test_the_served_config_turns_off_what_costs_a_shared_server_cpu():
    """Streamlit reads .streamlit/config.toml from the directory it is started in (the README's command, the
    Dockerfile and the browser tests all start in the repository root). Its default `runner.postScriptGC` ran a
    full gc.collect(2) after every script run: 75% of the server's CPU under the class load test."""
    import tomllib

    config = tomllib.loads((REPO_ROOT / ".streamlit" / "config.toml").read_text())
    assert config["runner"]["postScriptGC"] is False
    assert config["server"]["fileWatcherType"] == "none"


def test_the_architecture_picture_is_drawn_from_todays_code():
    drawer = load_script("docs/draw_architecture.py")
    missing = [where for where, _ in drawer.RUN_PATH if not (REPO_ROOT / where).exists()
               and not (REPO_ROOT / "bert_core" / where).exists()]
    assert not missing, f"the picture's run path names files that are gone: {missing}"
    assert (REPO_ROOT / "docs" / "architecture.svg").read_text() == drawer.draw(), \
        "docs/architecture.svg is stale: run .venv/bin/python docs/draw_architecture.py"
