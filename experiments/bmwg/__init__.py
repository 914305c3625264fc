"""The IETF BMWG inference-fabric benchmark (draft-calabria-bmwg-ai-fabric-inference-bench-02)
as a kvfabric suite: every test procedure as data (``catalog.PROCEDURES``), each runnable
one a declared sweep over the spec language (``plan.trials`` → ``load_spec`` →
``expand``), with what stands in for the draft's RDMA, ECN and PFC said per test. The
KPIs are ``experiments.analysis.bmwg``.

Modules: ``model`` (the dataclasses), ``bases`` (the reference fabric and workload
entries), ``stand_ins``, one module per group of categories (``kv_tests`` 5.x,
``disagg_tests`` 6.x, ``moe_tests`` 7.x, ``congestion_tests`` 8.x, ``routing_tests``
9.x, ``latency_tests`` 10.x, ``throughput_tests`` 11.x, ``scale_tests`` 12.x–13.x),
``health`` (Table 6), ``catalog`` and ``plan``; ``kvfabric bmwg run``'s ``fabric_map``
(the procedures' hosts on the user's fabric), ``suite`` (the plan on it), ``execute``
(the runs, through a ``run_spec``-like callable), ``run_tables`` (a run's KPI inputs),
``aggregate`` (per-point intervals), ``report`` (Section 14) and ``compare``.
"""
