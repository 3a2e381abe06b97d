//! STUB: being written.
