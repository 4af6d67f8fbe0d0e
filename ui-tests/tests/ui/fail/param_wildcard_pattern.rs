use agent_airlock::airlock_tool;

/// Look something up.
#[airlock_tool]
fn lookup(_: u64) -> u64 {
    0
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
