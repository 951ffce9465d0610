"""Test kits for code built on alance, shipped with it (as ``zarr.testing`` is with zarr).

* :mod:`alance.testing.stores` -- :class:`~alance.testing.stores.StoreConformance`, the suite
  every store backend must pass (subclass it, give it a ``store`` fixture);
* :mod:`alance.testing.commit_handlers` -- :class:`~alance.testing.commit_handlers.
  CommitHandlerConformance`, the suite every commit handler must pass (subclass it, give it a
  ``handler_setup`` fixture);
* :mod:`alance.testing.faults` -- :class:`~alance.testing.faults.FaultPlan`, a fault- and
  latency-injecting backend wrapper installed through ``storage_options={"wrap_backend": ...}``.

The suites need pytest and pytest-asyncio (``pip install alance[dev]``); the fault injector
needs nothing more than alance. alance's own backends and handlers run these same suites.
"""
