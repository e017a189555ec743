"""Helpers the test files share, by what they hold (tests/factories.py: the configs and small runs they build).

* `support.runs`: local runs through the command line (start, finish, resume, wait for steps, read back);
* `support.trainers`: `edgestream train` processes started the way torchrun starts them;
* `support.faults`: what the fault, outage and leader-loss tests check (a full disk, samples trained once, the
  PS's applied pushes, the cluster's elections and in-sync replicas);
* `support.streams`: hand-made device-topic messages, reading topics and the DLQ back, draining a dataset;
* `support.producers`: `edgestream produce` in a subprocess;
* `support.ps`: the Kafka parameter server in a thread of the test process;
* `support.sources`: Python source the tests write (a user's models module) or run (an import blocker).

tests/conftest.py puts tests/ on sys.path (`from support.runs import finish`) and has pytest rewrite the asserts
here as in a test file. A test file never imports another test file: what two of them share lives here.
"""
