"""kvfabric experiments, one room per concern: ``spec`` (the spec language),
``orchestration`` (plan, envelope, calibration, runner, references), ``measurement``
(what reads the live fabric), ``analysis`` (metrics, verdict, summary, estimates),
``output`` (results, report, plots) and ``cli`` (the ``kvfabric`` command, the top:
nothing imports it). Bundled ``specs/`` and their ``handouts/`` sit beside them."""
