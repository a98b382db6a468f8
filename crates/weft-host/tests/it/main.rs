//! weft-host's tests: one binary, a module per concern.

mod leases;
