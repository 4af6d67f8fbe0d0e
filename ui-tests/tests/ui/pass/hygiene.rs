//! User items named like the prelude's, and like the runtime's, must not change what the generated code
//! means: it names everything by absolute path.

use ::agent_airlock::{CallContext, airlock_tool};
use agent_airlock_ui_tests::call;
use serde_json::json;

#[allow(dead_code)]
struct Result;
#[allow(dead_code)]
struct Option;
#[allow(dead_code)]
struct Box;
#[allow(dead_code)]
struct String;
#[allow(dead_code)]
struct Vec;
#[allow(dead_code)]
struct Some;
#[allow(dead_code)]
struct None;
#[allow(dead_code)]
struct Ok;
#[allow(dead_code)]
struct Err;
#[allow(dead_code)]
struct Default;
#[allow(dead_code)]
struct Tool;
#[allow(dead_code)]
struct ToolSpec;
#[allow(dead_code)]
mod core {}
#[allow(dead_code)]
mod agent_airlock {}

/// Greet someone.
#[airlock_tool]
fn greet(
    /// Who to greet.
    name: std::string::String,
    /// How many times.
    times: std::option::Option<u8>,
) -> std::result::Result<std::string::String, ::agent_airlock::ToolError> {
    let times = usize::from(times.unwrap_or(1));
    std::result::Result::Ok(std::vec![std::format!("hello {name}"); times].join(", "))
}

/// Count the words of a text.
#[airlock_tool(rate = "5/second", ghost = "block")]
fn words(text: std::string::String) -> usize {
    text.split_whitespace().count()
}

fn main() {
    let tool = ::agent_airlock::tool!(greet);
    let spec = ::agent_airlock::tool::Tool::spec(&tool);
    assert_eq!(spec.name(), "greet");
    assert_eq!(spec.description(), "Greet someone.");
    let names: std::vec::Vec<&str> = spec.params().iter().map(|p| p.name()).collect();
    assert_eq!(names, ["name", "times"]);
    assert_eq!(spec.params()[1].description(), std::option::Option::Some("How many times."));

    let message = call(tool, json!({"name": "ada", "times": 2}), &CallContext::new());
    assert_eq!(message.content, "hello ada, hello ada", "{message:?}");

    let tool = ::agent_airlock::tool!(words);
    assert_eq!(::agent_airlock::tool::Tool::spec(&tool).ghost(), ::agent_airlock::tool::GhostPolicy::Block);
    let message = call(tool, json!({"text": "one two three"}), &CallContext::new());
    assert_eq!(message.content, "3", "{message:?}");
}
