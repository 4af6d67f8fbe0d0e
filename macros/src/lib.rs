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

/// Turns a free `fn` or `async fn` into a guarded tool; `tool!(path::to::f)` names the tool.
///
/// The function stays as written. Its doc comment is the tool's description and each parameter's doc
/// comment that parameter's; a parameter marked `#[inject]` is supplied by the host (through the call's
/// context) and never seen by the model. Every key is optional and takes a string literal:
///
/// | key | what it declares | example |
/// |---|---|---|
/// | `name` | the registered name, default the fn name; 1 to 64 ASCII letters, digits, `_`, `-` | `name = "search_docs"` |
/// | `description` | what the model reads, default the doc comment; not blank | `description = "Search the documentation"` |
/// | `escalate` | why a human must approve each call; not blank | `escalate = "moves money"` |
/// | `rate` | at most `N` calls per unit (`second`, `minute`, `hour`, `day`; `s`, `sec`, `m`, `min`, `h`, `d`); `N` ≥ 1 | `rate = "10/minute"` |
/// | `ghost` | what happens to arguments the tool does not declare: `strip` (default) or `block` | `ghost = "block"` |
/// | `effect` | the idempotency key; each `{param}` names a model-visible parameter whose type is `Serialize` | `effect = "refund:{payment_id}"` |
/// | `mask` | what is masked in the result: `none`, `all`, `secrets` (default), `pii` or kind names, comma-separated | `mask = "secrets,pii"` |
/// | `crate` | the path of the runtime crate, when it is renamed or re-exported | `crate = "::my_runtime::airlock"` |
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
