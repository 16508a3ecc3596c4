# Hugging Face Spaces (Docker SDK) image for the BERT explorer: CPU torch by default. For a Space with a GPU, set the
# Space variable TORCH_INDEX to a CUDA wheel index of the same torch (https://download.pytorch.org/whl/cu130): Spaces
# pass their variables to the build, and the app then trains its runs on the GPU (docs/deployment.md).
FROM python:3.11-slim
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# Spaces run the container as user 1000.
RUN useradd --create-home --uid 1000 user
WORKDIR /home/user/app

COPY --chown=user requirements.txt .
# The CPU wheel index keeps torch small; the rest comes from PyPI.
RUN pip install --index-url "$TORCH_INDEX" torch==2.13.0 \
 && pip install -r requirements.txt

COPY --chown=user . .
USER user
# A Space serves strangers: public mode turns off every box that takes a server path (docs/deployment.md, "public mode").
ENV HOME=/home/user BERT_CORE_CACHE=/home/user/.cache/bert_core BERT_EXPLORER_PUBLIC=1
# The real fine-tuning tasks, fetched now so that the Fine-tune page offers them at once. Without a network at build
# time the image still builds, and the page fetches a task when it is first picked.
RUN python -m bert_core download polarity ag_news conll2000 \
 || echo "warning: the fine-tuning tasks were not fetched; the Fine-tune page will fetch them on first use"

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4)"
CMD ["streamlit", "run", "app.py", "--server.port", "8501", "--server.address", "0.0.0.0"]
