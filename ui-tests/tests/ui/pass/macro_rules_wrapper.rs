//! Tools stamped out by a `macro_rules!`: the user's types come from the caller, the attribute and the
//! parameter names from the macro, and the generated locals must resolve across both.

use agent_airlock::{CallContext, airlock_tool, tool, tool::Tool};
use agent_airlock_ui_tests::call;
use serde_json::json;

macro_rules! echo_tool {
    ($name:ident, $ty:ty) => {
        /// Echo the value back.
        #[airlock_tool]
        fn $name(
            /// The value to echo.
            value: $ty,
        ) -> $ty {
            value
        }
    };
}

echo_tool!(echo_number, u32);
echo_tool!(echo_words, Vec<String>);

fn main() {
    assert_eq!(tool!(echo_number).spec().name(), "echo_number");
    assert_eq!(tool!(echo_words).spec().params()[0].description(), Some("The value to echo."));
    assert_eq!(call(tool!(echo_number), json!({"value": 7}), &CallContext::new()).content, "7");
    assert_eq!(call(tool!(echo_words), json!({"value": ["a", "b"]}), &CallContext::new()).content, r#"["a","b"]"#);
}
