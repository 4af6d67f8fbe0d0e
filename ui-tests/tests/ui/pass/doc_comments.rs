//! Doc comments become descriptions: paragraphs and indentation survive, and doc attributes written as
//! macro calls (`concat!`, `include_str!`, a `macro_rules!` fragment) are evaluated when the crate compiles.

use agent_airlock::{airlock_tool, input_schema, tool, tool::Tool};

/// Refund a payment.
///
/// Only for captured payments:
///
///     refund(payment_id)
#[airlock_tool]
fn refund(
    /// The payment to refund.
    ///
    /// Starts with `pi_`.
    payment_id: String,
) -> String {
    payment_id
}

#[doc = concat!("Cancel ", "an order.")]
#[doc = ""]
#[doc = " Irreversible."]
#[airlock_tool]
fn cancel(#[doc = concat!("The order", " id.")] order_id: u64) -> u64 {
    order_id
}

macro_rules! described_tool {
    ($doc:expr, $name:ident) => {
        #[doc = $doc]
        #[airlock_tool]
        fn $name() -> u8 {
            1
        }
    };
}

described_tool!("Ping the service.", ping);
described_tool!(concat!("Pong", " back."), pong);

fn main() {
    let spec = tool!(refund).spec();
    assert_eq!(spec.description(), "Refund a payment.\n\nOnly for captured payments:\n\n    refund(payment_id)");
    assert_eq!(spec.params()[0].description(), Some("The payment to refund.\n\nStarts with `pi_`."));
    assert_eq!(
        input_schema(spec)["properties"]["payment_id"]["description"],
        "The payment to refund.\n\nStarts with `pi_`."
    );

    let spec = tool!(cancel).spec();
    assert_eq!(spec.description(), "Cancel an order.\n\nIrreversible.");
    assert_eq!(spec.params()[0].description(), Some("The order id."));

    assert_eq!(tool!(ping).spec().description(), "Ping the service.");
    assert_eq!(tool!(pong).spec().description(), "Pong back.");
}
