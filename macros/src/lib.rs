//! The `#[airlock_tool]` attribute of [agent-airlock](https://docs.rs/agent-airlock).
//!
//! Use it through the `agent-airlock` crate, which re-exports it and holds the runtime the generated code
//! calls. The pipeline, after thiserror's: `ast` (the signature parsed, the body kept as raw tokens, the
//! parameters) and `attr` (the attribute's keys to typed values, through the value grammars of
//! `agent-airlock-grammar`) collect every error in one `ctxt::Ctxt`; `valid` makes the checks that need
//! both and returns a checked model; `expand` writes the tool type from it, or on error re-emits the
//! function (minus our parameter markers) and a stub of the tool type next to the errors, so the user sees
//! only the real mistakes. Generated code names only `::agent_airlock::__private`. Every diagnostic has a
//! trybuild case in `ui-tests/`.

#![forbid(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod ast;
mod attr;
mod ctxt;
mod expand;
mod valid;

use proc_macro::TokenStream;

#[doc = agent_airlock_grammar::airlock_tool_keys!()]
///
/// Every mistake is a compile error at the offending value or type: unknown or duplicate keys, bad values,
/// methods, generic, `unsafe`, `const` or variadic functions, pattern or `impl Trait` parameters, a
/// parameter type that is not `Deserialize + JsonSchema`, a result that is not `Serialize`, an error that
/// is not `Display`, a future that is not `Send`.
///
/// The `agent-airlock` crate's re-export carries a runnable example.
#[proc_macro_attribute]
pub fn airlock_tool(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::airlock_tool(args.into(), input.into()).into()
}

/// Names the tool generated for a function: `tool!(path::to::my_fn)` is the tool value.
#[proc_macro]
pub fn tool(input: TokenStream) -> TokenStream {
    expand::tool_path(input.into()).into()
}
