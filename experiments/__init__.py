"""kvfabric experiments, one room per concern, top to bottom: ``cli`` (the ``kvfabric``
command, the top: nothing imports it), ``orchestration`` (plan, envelope, calibration,
runner, references), ``output`` (results, report, plots), ``analysis`` (metrics,
verdict, summary, estimates), ``measurement`` (what reads the live fabric) and ``spec``
(the spec language). A room imports only itself and the rooms below it
(docs/architecture.md). Bundled ``specs/`` and their ``handouts/`` sit beside them."""
