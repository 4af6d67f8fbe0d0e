//! `crate = "..."` points the generated code at the runtime under another name: a `use` rename, an
//! `extern crate` rename and a re-export from a module of the user's crate.
// A module's `pub` items, as a user's library would have them: this program is a crate of its own.
#![allow(unreachable_pub)]

extern crate agent_airlock as renamed;

use agent_airlock as my_airlock;
use agent_airlock_ui_tests::call;
use my_airlock::{CallContext, airlock_tool, tool, tool::Tool};
use serde_json::json;

mod runtime {
    pub use agent_airlock::*;
}

/// Add one.
#[airlock_tool(crate = "my_airlock", rate = "3/minute")]
fn increment(value: i64) -> i64 {
    value + 1
}

/// Add two.
#[airlock_tool(crate = "::renamed", ghost = "block")]
fn add_two(value: i64) -> i64 {
    value + 2
}

/// Add three.
#[airlock_tool(crate = "crate::runtime")]
fn add_three(value: i64) -> i64 {
    value + 3
}

fn main() {
    let spec = tool!(increment).spec();
    assert_eq!(spec.name(), "increment");
    assert_eq!(spec.rate(), Some("3/minute".parse::<my_airlock::Rate>().unwrap()));
    assert_eq!(call(tool!(increment), json!({"value": 1}), &CallContext::new()).content, "2");

    assert_eq!(tool!(add_two).spec().ghost(), renamed::tool::GhostPolicy::Block);
    assert_eq!(call(tool!(add_two), json!({"value": 1}), &CallContext::new()).content, "3");

    assert_eq!(call(tool!(add_three), json!({"value": 1}), &CallContext::new()).content, "4");
}
