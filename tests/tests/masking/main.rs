//! Masking of results and arguments: the corpus, the gitleaks rules, masking through the dispatcher.
//!
//! One test binary per subsystem, not one per file: each binary links the whole runtime (CONTRIBUTING.md).

pub mod masking_arguments;
pub mod masking_corpus;
pub mod masking_dispatch;
pub mod masking_gitleaks;
