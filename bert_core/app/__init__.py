"""The app's pages' side of the server: what the Streamlit pages draw with. `app_state` is what the pages
import, gathered from the only modules that call Streamlit; beside them, Streamlit-free, the words the pages say
about runs (`run_panel`, `visitor_runs`), a teacher's lesson classes (`lesson_classes`, `class_view`), what the
Export page hands out (`export`) and the app started for tests and benchmarks (`app_server`). It imports the
server (bert_core.serve), which hosts the runs and never imports it back."""
