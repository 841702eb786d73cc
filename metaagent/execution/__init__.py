"""Running model-written code: code tests, the runner and its harness, the isolation layer, killable helper pools.

Modules: :mod:`.code` (the program in an answer, run on a task's tests: ``run_code_tests``), :mod:`.code_tests`
(test formats normalised into one ``TestSuite``, output comparison), :mod:`.code_runner` (one program on one
test in a limited process) with its child side :mod:`._code_harness`, :mod:`.isolation` / :mod:`._confine` (the
kernel mechanism that confines such a process, chosen once), :mod:`.cgroup` (memory and pids bounds),
:mod:`.process` (killing a helper and what it started), :mod:`.worker_pool` (long-lived helpers under a
deadline: math-verify, a domain's registered reward), :mod:`._plain` (results read back as literals, never
objects), :mod:`.errors`.
"""
