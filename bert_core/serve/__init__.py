"""The serving wing: what the Streamlit app needs, and the only wing that knows Streamlit is there (app_state, which
gathers its app_* parts for the pages). Streamlit-free beside it: which job trains a run (job_factory), runs that
outlive a tab, the fair queue and its turns, child training processes, public-mode storage and its janitor, where
models come from, and what the Export page hands out.

May import: every wing but the CLI.
"""
