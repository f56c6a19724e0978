"""The wiring, without Qt: which servers to watch (``detection``, ``servers``), a monitor and its devices
(``build``, ``monitor``, ``group_monitor``), the demo (``demo``), the record switch (``record``), the session a window
or a command holds (``session``), secrets (``keystore``) and clean endings (``endings``)."""
