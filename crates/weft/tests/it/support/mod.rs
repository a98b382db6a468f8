//! What the integration tests of this crate share: weft-testkit's service variables,
//! PostgreSQL databases of a test's own and `psql`.

pub use weft_testkit::{Database, psql, service_var};
