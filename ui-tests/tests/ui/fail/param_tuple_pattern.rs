use agent_airlock::airlock_tool;

/// Look something up.
#[airlock_tool]
fn lookup((a, b): (u64, u64)) -> u64 {
    a + b
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
