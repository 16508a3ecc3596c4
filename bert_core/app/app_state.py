"""The Streamlit side of the explorer, as the pages import it: one name space over the modules that call Streamlit,
each one idea, so that a page reads `app_state.sidebar()`, `app_state.RUNS`, `app_state.plotly(...)`.

- `app_runs`: the server's one of each (its log, its store of runs, the lesson classes, the launcher's warm-up, how
  often live views redraw); which job trains a run is `job_factory`'s, which has no Streamlit and no torch;
- `app_tab`: this tab's run of each page (URL, share link, session) and this browser's id and *My runs*;
- `app_models`: the models the picker offers; `app_sidebar`: the sidebar that draws the picker and the page list;
- `app_cache`: what the lesson and inspection pages compute from the active model, kept in Streamlit's caches;
- `app_drawing`: the page list, links, Plotly charts, errors, one update as *Step once* shows it;
- `app_widgets`: widget values seeded from the URL, kept across pages, written back;
- `app_run_panel`: the run panel the Train and Fine-tune pages share (status, queue, Stop, Reset, share link).

What they steer lives in Streamlit-free modules, tested without it: training runs and their jobs
(`bert_core.serve.runs`, `.jobs`), checkpoint folders (`bert_core.serve.model_sources`), files and public mode
(`bert_core.serve.app_storage`).
"""

from __future__ import annotations

# Every name below is this module's for the pages (and the tests that drive them): re-exported, not used here.
# ruff: noqa: F401
from bert_core.errors import BertCoreError
from bert_core.app.app_cache import (
    DECISION_POOL,
    decision_accuracy,
    examples_note,
    model_probes,
    pair_attention,
    toy_pretraining_data,
)
from bert_core.app.app_drawing import (
    APP_ROOT,
    EXPORT_WIDTH_PX,
    NAVIGATION,
    navigation,
    page_link,
    page_link_with,
    plotly,
    salience_panel,
    script_frame,
    show_error,
    show_step_record,
)
from bert_core.app.app_models import (
    SOURCE_CODES,
    SOURCE_FOLDER,
    SOURCE_SAVED,
    SOURCE_SESSION,
    SOURCE_SHIPPED,
    SOURCE_UPLOAD,
    SOURCES,
    load_folder_cached,
    model_sources,
    quick_config,
    shipped_model,
)
from bert_core.app.app_models import waiting_model_note as _waiting_model_note
from bert_core.app.app_run_panel import FINETUNE_WORDS, TRAIN_WORDS, reset_button, run_status, share_box, stop_button
from bert_core.app.app_runs import (
    CHART_POLL_ENV,
    JOB_FACTORY,
    LESSON_CLASSES,
    LOG_LEVEL_ENV,
    POLL_ENV,
    RECORDS,
    RUNS,
    chart_poll_seconds,
    configure_logging,
    poll_seconds,
    warm_launcher,
)
from bert_core.app.app_runs import session_alive_from_runtime as _session_alive_from_runtime
from bert_core.app.app_sidebar import sidebar
from bert_core.app.app_tab import (
    FINETUNE_PARAM,
    FINETUNE_WATCH_PARAM,
    RUN_PARAM,
    WATCH_PARAM,
    attach_run,
    current_job,
    current_run,
    my_runs,
    my_runs_list,
    note_class_run,
    reset_note,
    session_id,
    set_current_run,
    tab_run_folders,
    visitor_id,
)
from bert_core.app.app_widgets import (
    SMOOTHING,
    follow_default,
    init_widget,
    persist_keys,
    query_default,
    seed_setting,
    setting_widget,
    setting_widgets,
    smoothing_slider,
    sync_query,
)
from bert_core.training.finetune_spec import FinetuneSpec
from bert_core.app.lesson_classes import PUBLIC_URL_ENV  # a server setting (tests/test_repository.py: docs)
from bert_core.serve.model_sources import ActiveModel
from bert_core.serve.run_protocols import FINETUNE_PAGE, TRAIN_PAGE
from bert_core.serve.runs import OWNER, VIEWER, Run
from bert_core.app.url_settings import Within, one_of
