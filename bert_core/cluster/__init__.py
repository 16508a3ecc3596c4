"""Optional job kinds that train a server's runs elsewhere: a Ray cluster (`ray_job`: both sides of a run;
`ray_cluster`). The server's job factory imports one by name only when it is chosen (serve.job_factory.PLUGINS).

May import: serve and the wings below it; nothing imports it but by name (job_factory.plugin).
"""
