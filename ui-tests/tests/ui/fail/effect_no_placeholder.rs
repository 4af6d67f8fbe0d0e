use agent_airlock::airlock_tool;

/// Refund a payment.
#[airlock_tool(effect = "refund")]
fn refund(payment_id: String) -> String {
    payment_id
}

fn main() {
    let _ = agent_airlock::tool!(refund);
}
