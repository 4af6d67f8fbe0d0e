use agent_airlock::airlock_tool;

/// A filter the model cannot produce: neither `Deserialize` nor `JsonSchema`.
pub struct Filter {
    pub min: u64,
}

/// Look something up.
#[airlock_tool]
fn lookup(filters: Vec<Filter>) -> usize {
    filters.len()
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
