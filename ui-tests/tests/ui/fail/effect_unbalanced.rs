use agent_airlock::airlock_tool;

/// Refund a payment.
#[airlock_tool(effect = "refund:{payment_id")]
fn refund(payment_id: String) -> String {
    payment_id
}

/// Refund another payment.
#[airlock_tool(effect = "refund:payment_id}")]
fn refund_again(payment_id: String) -> String {
    payment_id
}

fn main() {
    let _ = agent_airlock::tool!(refund);
    let _ = agent_airlock::tool!(refund_again);
}
