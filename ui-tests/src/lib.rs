//! trybuild cases live in `tests/ui`; this crate only gives them dependencies.
