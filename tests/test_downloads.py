import http.server
import threading
import zipfile

import pytest

from bert_core.data.corpora import load_corpus
from bert_core.data.downloads import (
    SOURCES,
    brown_text_from_zip,
    download,
    fetch,
    fetch_corpus_text,
    sha256_of,
    wikitext_text_from_parquet,
)
from bert_core.errors import BertCoreError


@pytest.fixture
def server(shared_data):
    """A local HTTP server over the shared Tiny Shakespeare: /input.txt whole, /cut.txt dropped halfway, /gone 404."""
    body = (shared_data / "tinyshakespeare" / "input.txt").read_bytes()
    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            if self.path == "/input.txt":
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif self.path == "/cut.txt":
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
            else:
                self.send_error(404)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", body, hits
    httpd.shutdown()
    httpd.server_close()


def test_download_reports_progress_and_verifies_the_pinned_checksum(server, tmp_path):
    base, body, _ = server
    seen = []
    digest = download(f"{base}/input.txt", tmp_path / "ts.txt", sha256=SOURCES["tinyshakespeare"].sha256,
                      progress=lambda done, total: seen.append((done, total)))
    assert digest == SOURCES["tinyshakespeare"].sha256
    assert (tmp_path / "ts.txt").read_bytes() == body
    assert seen[0] == (0, len(body)) and seen[-1] == (len(body), len(body))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and len(seen) > 3
    assert list(tmp_path.iterdir()) == [tmp_path / "ts.txt"]


def test_checksum_mismatch_keeps_no_file(server, tmp_path):
    base, _, _ = server
    with pytest.raises(BertCoreError, match="checksum mismatch .* expected sha256 0000.*nothing was kept"):
        download(f"{base}/input.txt", tmp_path / "ts.txt", sha256="0" * 64)
    assert list(tmp_path.iterdir()) == []


def test_interrupted_download_leaves_no_half_file(server, tmp_path):
    base, _, _ = server
    with pytest.raises(BertCoreError, match="interrupted after .* run it again"):
        download(f"{base}/cut.txt", tmp_path / "ts.txt")
    assert list(tmp_path.iterdir()) == []


def test_missing_file_on_the_server_is_a_clear_error(server, tmp_path):
    base, _, _ = server
    with pytest.raises(BertCoreError, match="HTTP 404"):
        download(f"{base}/gone", tmp_path / "x.txt")
    assert list(tmp_path.iterdir()) == []


def test_offline_error_names_the_alternatives(tmp_path):
    with pytest.raises(BertCoreError, match=r"offline, use the built-in 'toy' corpus, or a local copy.*file path"):
        download("http://127.0.0.1:9/input.txt", tmp_path / "x.txt", timeout=5)


def test_second_fetch_is_a_cache_hit(server, tmp_path):
    base, body, hits = server
    first = fetch("tinyshakespeare", cache_dir=tmp_path, url=f"{base}/input.txt")
    second = fetch("tinyshakespeare", cache_dir=tmp_path, url=f"{base}/input.txt")
    assert first == second == tmp_path / "tinyshakespeare.txt"
    assert hits == ["/input.txt"]
    assert first.read_bytes() == body


def test_damaged_cache_file_is_downloaded_again(server, tmp_path):
    base, body, hits = server
    (tmp_path / "tinyshakespeare.txt").write_text("not shakespeare")
    path = fetch("tinyshakespeare", cache_dir=tmp_path, url=f"{base}/input.txt")
    assert path.read_bytes() == body and hits == ["/input.txt"]


def test_unpinned_download_records_its_checksum_for_later_loads(server, tmp_path):
    base, body, hits = server
    path = fetch("wikitext-2", cache_dir=tmp_path, url=f"{base}/input.txt")  # any bytes stand in for the parquet
    recorded = (tmp_path / (path.name + ".sha256")).read_text().strip()
    assert recorded == sha256_of(path)
    path.write_bytes(b"tampered")
    fetch("wikitext-2", cache_dir=tmp_path, url=f"{base}/input.txt")
    assert hits == ["/input.txt", "/input.txt"] and path.read_bytes() == body


def test_corpus_text_downloads_when_no_shared_copy(server, tmp_path):
    base, body, _ = server
    text, where = fetch_corpus_text("tinyshakespeare", cache_dir=tmp_path, url=f"{base}/input.txt", use_shared=False)
    assert text == body.decode("utf-8") and "cached at" in where


def test_named_corpus_uses_the_shared_copy_without_network(shared_data, tmp_path):
    corpus = load_corpus("tinyshakespeare", cache_dir=tmp_path)
    assert corpus.source.endswith("tinyshakespeare/input.txt")
    assert list(tmp_path.iterdir()) == []
    assert 300 < corpus.num_documents < 500 and corpus.num_words > 150_000
    assert corpus.documents[0][0].startswith("First Citizen: Before we proceed any further")


def test_wikitext_parquet_rows_become_articles(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from bert_core.data.corpora import wikitext_documents

    rows = ["", " = Alpha = \n", "", " Alpha is a letter . It comes first .\n", " = = History = = \n",
            " It is 3 @.@ 5 thousand years old .\n", " = Beta = \n", " Beta follows alpha .\n"]
    pq.write_table(pa.table({"text": rows}), tmp_path / "w.parquet")
    docs = wikitext_documents(wikitext_text_from_parquet(tmp_path / "w.parquet"))
    assert docs == [["Alpha is a letter .", "It comes first .", "It is 3.5 thousand years old ."],
                    ["Beta follows alpha ."]]


def test_nltk_brown_zip_becomes_one_sentence_per_line(tmp_path):
    with zipfile.ZipFile(tmp_path / "brown.zip", "w") as z:
        z.writestr("brown/ca01", "\n\n\tThe/at Fulton/np-tl jury/nn said/vbd ``/`` no/at ''/'' ./.\n\n\tIt/pps ended/vbd ./.\n")
        z.writestr("brown/cb02", "\tA/at second/od text/nn ./.\n")
        z.writestr("brown/README", "not a text")
    text = brown_text_from_zip(tmp_path / "brown.zip")
    assert text == 'The Fulton jury said " no " .\nIt ended .\n\nA second text .\n'
