"""SimPy discrete-event simulator of PPD layer schedules on modelled GPUs."""
