"""Running the operator's test: the child process (``runner``), private copies of the recorded tree
(``execution``), where runs happen (``executors``), what a run's output means (``verdict``, ``command_check``,
``environment``), what it may have read (``interpreter_files``), chip health (``chips``) and archives
(``artifacts``)."""
