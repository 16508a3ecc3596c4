"""Optional job kinds that train a server's runs elsewhere: a Ray cluster (`ray_job`, `ray_cluster`, `ray_actor`).
The server's job factory imports one by name only when it is chosen (bert_core.serve.job_factory.PLUGINS).

May import: serve and the wings below it; nothing imports it but by name (job_factory.plugin).
"""
