"""Qt-free core: readings, snapshots, rates, history, alerts, recording."""
