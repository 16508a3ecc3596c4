"""The app's pages' side of the server: what the Streamlit pages draw with. `app_state` is what the pages
import, gathered from the only modules that call Streamlit (widget state and URL settings among them); beside
them, Streamlit-free, the words the pages say about runs (`run_panel`, `visitor_runs`), a teacher's lesson classes
(`lesson_classes`, `class_view`) and what the Export page hands out (`export`). It imports the server
(bert_core.serve), which hosts the runs and never imports it back.

May import: every wing below it (serve and those under it); never cluster or the CLI.
"""
