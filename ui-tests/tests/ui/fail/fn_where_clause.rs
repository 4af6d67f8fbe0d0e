use agent_airlock::airlock_tool;

/// Look something up.
#[airlock_tool]
fn lookup(id: u64) -> u64
where
    u64: Copy, {
    id
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
