use agent_airlock::airlock_tool;

/// Refund a payment.
#[airlock_tool(effect = "refund:{payment}")]
fn refund(payment_id: String, amount: u64) -> String {
    format!("{payment_id} {amount}")
}

fn main() {
    let _ = agent_airlock::tool!(refund);
}
