use agent_airlock::airlock_tool;

/// Look something up.
#[airlock_tool]
pub struct Lookup {
    pub id: u64,
}

fn main() {
    let _ = Lookup { id: 1 };
}
