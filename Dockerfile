# Hugging Face Spaces (Docker SDK) image for the BERT explorer: CPU torch by default. For a Space with a GPU, set the
# Space variable TORCH_INDEX to a CUDA wheel index of the same torch (https://download.pytorch.org/whl/cu130): Spaces
# pass their variables to the build, and the app then trains its runs on the GPU (docs/deployment.md).
FROM python:3.11-slim
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# Spaces run the container as user 1000. The app's folder is made here as that user's: a WORKDIR that made it would
# make it root's, and Docker's BuildKit keeps an existing folder's owner at `COPY --chown` (podman's builder hands it
# over), so that the app could write nothing there.
RUN useradd --create-home --uid 1000 user \
 && install -d -o user -g user /home/user/app
WORKDIR /home/user/app

COPY --chown=user requirements.txt .
# The CPU wheel index keeps torch small; the rest comes from PyPI.
RUN pip install --index-url "$TORCH_INDEX" torch==2.13.0 \
 && pip install -r requirements.txt

COPY --chown=user . .
USER user
# A Space serves strangers: public mode turns off every box that takes a server path (docs/deployment.md, "public mode").
# Runs, their records and saved runs go to /data when the Space has persistent storage (a writable /data, kept
# across restarts), else to the user's home (lost at a restart); bert_core.paths.app_data_dir reads the list.
ENV HOME=/home/user BERT_CORE_CACHE=/home/user/.cache/bert_core BERT_EXPLORER_PUBLIC=1 \
    BERT_EXPLORER_DATA=/data:/home/user
# A Space shows the app inside huggingface.co's page, a frame of another site, where Streamlit's cookie-based XSRF
# check refuses every upload (HTTP 403) and a browser that blocks third-party cookies (Safari, a private window)
# never keeps the cookie at all. The check guards nothing else here (no st.login; an upload's address holds its
# session's random id); the origin check of the app's WebSocket (server.enableCORS) stays on.
ENV STREAMLIT_SERVER_ENABLE_XSRF_PROTECTION=false
# The real fine-tuning tasks and the treebank, fetched now so that the Fine-tune and Attention pages offer them at
# once. Each is tried and reported on its own line; without a network at build time the image still builds, and a
# page fetches a missing one when it is first asked for.
RUN python -m bert_core download polarity ag_news conll2000 ud-english-ewt \
 || echo "warning: not every task was fetched (see above); the pages fetch a missing one on first use"

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4)"
CMD ["streamlit", "run", "app.py", "--server.port", "8501", "--server.address", "0.0.0.0"]
