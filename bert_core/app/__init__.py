"""The app's pages' side of the server: what the Streamlit pages draw with. The only modules that call Streamlit are
the `app_*` ones: the server's one store of runs (`app_state`), the sidebar and its models, this tab's run and its
panel, widget state, and drawing; beside them, Streamlit-free, URL settings, the words the pages say about runs
(`run_panel`), a teacher's lesson classes (`lesson_classes`, `class_view`), what the Export page hands out
(`export`) and the pages' longer sentences as data (`page_copy`). It imports the server (bert_core.serve), which
hosts the runs and never imports it back.

May import: every wing below it (serve and those under it); never cluster or the CLI.
"""
