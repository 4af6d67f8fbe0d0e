use agent_airlock::airlock_tool;

/// Look something up.
#[airlock_tool]
fn lookup(id: impl std::fmt::Display) -> String {
    id.to_string()
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
