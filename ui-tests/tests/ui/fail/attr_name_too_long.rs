use agent_airlock::airlock_tool;

/// Look something up.
#[airlock_tool(name = "lookup_the_customer_record_by_its_numeric_identifier_in_the_crm_db")]
fn lookup(id: u64) -> u64 {
    id
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
