use agent_airlock::airlock_tool;

/// Look up a customer.
#[airlock_tool(mask = "secrets,passports")]
fn lookup(id: u64) -> u64 {
    id
}

/// Look up another customer.
#[airlock_tool(mask = "none,pii")]
fn lookup_again(id: u64) -> u64 {
    id
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
    let _ = agent_airlock::tool!(lookup_again);
}
