"""The Streamlit side of the explorer as the pages import it (`app_state.sidebar()`, `app_state.RUNS`,
`app_state.plotly(...)`): one name space over the only modules that call Streamlit, each one idea (the package's
docstring and docs/architecture.md list them). What they steer is Streamlit-free and tested without it."""

from __future__ import annotations

# Every name below is this module's for the pages (and the tests that drive them): re-exported, not used here.
# ruff: noqa: F401
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
    NAVIGATION,
    navigation,
    page_link,
    plotly,
    salience_panel,
    script_frame,
    show_error,
    show_step_record,
)
from bert_core.app.app_models import (
    SOURCE_FOLDER,
    SOURCE_SAVED,
    SOURCE_SESSION,
    SOURCE_SHIPPED,
    SOURCE_UPLOAD,
    load_folder_cached,
    quick_config,
    shipped_model,
)
from bert_core.app.app_run_panel import busy_caption, reset_button, run_status, share_box, stop_button, time_left
from bert_core.app.app_runs import (
    CHART_POLL_ENV,
    LESSON_CLASSES,
    LOG_LEVEL_ENV,
    POLL_ENV,
    RECORDS,
    RUNS,
    chart_poll_seconds,
    poll_seconds,
    warm_launcher,
)
from bert_core.app.app_sidebar import sidebar
from bert_core.app.app_tab import (
    WATCH_PARAM,
    attach_run,
    current_job,
    current_run,
    my_runs_list,
    other_models,
    reset_note,
    session_id,
    set_current_run,
    visitor_id,
)
from bert_core.app.app_widgets import (
    SMOOTHING,
    follow_default,
    init_widget,
    kept_choice,
    persist_keys,
    seed_setting,
    setting_widget,
    setting_widgets,
    smoothing_slider,
    sync_query,
    token_picker,
)
from bert_core.app.lesson_classes import PUBLIC_URL_ENV  # a server setting (tests/test_repository.py: docs)
from bert_core.app.run_panel import FINETUNE_WORDS, TRAIN_WORDS
from bert_core.app.url_settings import Within, one_of
from bert_core.serve.runs import OWNER, VIEWER
