//! The `#[airlock_tool]` attribute of [agent-airlock](https://docs.rs/agent-airlock).
//!
//! Use it through the `agent-airlock` crate, which re-exports it and holds the runtime the generated code
//! calls. The pipeline: [`attr`] (the attribute's keys to typed values) and [`ast`] (the function's
//! parameters) collect every error in one [`ctxt::Ctxt`]; [`expand`] writes the tool type; on error
//! [`expand::fallback`] re-emits the function (minus our parameter markers) and a stub of the tool type next
//! to the errors, so the user sees only the real mistakes. Every diagnostic has a trybuild case in
//! `ui-tests/`.

#![forbid(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod ast;
mod attr;
mod ctxt;
mod expand;
mod valid;

use proc_macro::TokenStream;

/// Turns a free `fn` or `async fn` into a guarded tool. See the `agent-airlock` crate for the keys.
#[proc_macro_attribute]
pub fn airlock_tool(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::airlock_tool(args.into(), input.into()).into()
}

/// Names the tool generated for a function: `tool!(path::to::my_fn)` is the tool value.
#[proc_macro]
pub fn tool(input: TokenStream) -> TokenStream {
    expand::tool_path(input.into()).into()
}
