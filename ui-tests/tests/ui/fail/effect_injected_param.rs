use agent_airlock::{State, airlock_tool};

struct Billing;

/// Refund a payment.
#[airlock_tool(effect = "refund:{billing}:{payment_id}")]
fn refund(payment_id: String, #[inject] billing: State<Billing>) -> String {
    let _ = billing;
    payment_id
}

fn main() {
    let _ = agent_airlock::tool!(refund);
}
