//! Return types spelled `Result<…>`: the standard two-argument `Result` (reported at `T` and `E` when they
//! do not fit), a one-argument alias, and a type of the user's own that is merely named `Result`, which is
//! an ordinary result.
// A module's `pub` items, as a user's library would have them: this program is a crate of its own.
#![allow(unreachable_pub)]

use agent_airlock::{CallContext, Status, airlock_tool, tool};
use agent_airlock_ui_tests::call;
use serde_json::json;

mod shapes {
    /// Not `core::result::Result`: serialized like any other result.
    #[derive(serde::Serialize)]
    pub enum Result<A, B> {
        Kept(A),
        Dropped(B),
    }

    /// A one-argument alias, as `io::Result` is.
    pub type Outcome<T> = core::result::Result<T, String>;
}

/// Keep even numbers.
#[airlock_tool]
fn keep_even(value: u32) -> shapes::Result<u32, String> {
    if value.is_multiple_of(2) { shapes::Result::Kept(value) } else { shapes::Result::Dropped("odd".to_owned()) }
}

/// Halve an even number.
#[airlock_tool]
fn halve(value: u32) -> shapes::Outcome<u32> {
    if value.is_multiple_of(2) { Ok(value / 2) } else { Err(format!("{value} is odd")) }
}

/// Third a number divisible by three.
#[airlock_tool]
fn third(value: u32) -> std::result::Result<u32, std::fmt::Error> {
    if value.is_multiple_of(3) { Ok(value / 3) } else { Err(std::fmt::Error) }
}

fn main() {
    let context = CallContext::new();
    assert_eq!(call(tool!(keep_even), json!({"value": 4}), &context).content, r#"{"Kept":4}"#);
    let dropped = call(tool!(keep_even), json!({"value": 3}), &context);
    assert_eq!((dropped.content.as_str(), dropped.status), (r#"{"Dropped":"odd"}"#, Status::Success));

    assert_eq!(call(tool!(halve), json!({"value": 8}), &context).content, "4");
    let odd = call(tool!(halve), json!({"value": 7}), &context);
    assert_eq!((odd.content.as_str(), odd.status), ("7 is odd", Status::Error));

    assert_eq!(call(tool!(third), json!({"value": 9}), &context).content, "3");
    assert_eq!(call(tool!(third), json!({"value": 8}), &context).status, Status::Error);
}
