//! `airlock operators add | list | revoke`: the operators file hosts check decisions against.

use std::path::PathBuf;

use agent_airlock::approval::display::escape;
use agent_airlock::approval::operators::{OperatorEntry, OperatorKey, OperatorRole, Operators};
use clap::{Args, Subcommand};

use serde_json::{Value, json};

use crate::Failure;
use crate::output::print_json;

#[derive(Subcommand)]
pub(crate) enum OperatorsCommand {
    /// Make a signing key for NAME: the private key goes to a new file readable by its owner only (never
    /// overwritten), the public key is appended to the operators file.
    Add {
        /// The operator's name (or the console's, with `--console`).
        name: String,
        /// Where to write the private key (a new file, mode 0600).
        #[arg(long, value_name = "FILE")]
        key_out: PathBuf,
        /// The key is a console's: it attests the operators signed in to that console.
        #[arg(long)]
        console: bool,
        #[command(flatten)]
        file: OperatorsFileArg,
    },
    /// The operators file's entries.
    List {
        #[command(flatten)]
        file: OperatorsFileArg,
    },
    /// Revoke every key listed under NAME: its signatures, past and future, count for nothing.
    Revoke {
        /// The operator's name.
        name: String,
        #[command(flatten)]
        file: OperatorsFileArg,
    },
}

/// The operators file (TOML, `[[operator]] name = … key = "ed25519:…"`).
#[derive(Args, Clone)]
pub(crate) struct OperatorsFileArg {
    /// The operators file.
    #[arg(long = "operators", env = "AIRLOCK_OPERATORS", default_value = "operators.toml", value_name = "FILE")]
    pub(crate) operators: PathBuf,
}

/// `airlock operators add | list | revoke`.
pub(crate) fn run(command: &OperatorsCommand, json: bool) -> Result<(), Failure> {
    match command {
        OperatorsCommand::Add { name, key_out, console, file } => {
            let mut operators = Operators::load_or_empty(&file.operators).map_err(|e| e.to_string())?;
            let key = OperatorKey::generate(name).map_err(|e| e.to_string())?;
            let role = if *console { OperatorRole::Console } else { OperatorRole::Operator };
            // Checked before the private key is written, so a refused name leaves no stray key behind.
            operators
                .add(OperatorEntry { name: name.clone(), key: key.key_id(), role, revoked: false })
                .map_err(|e| e.to_string())?;
            key.write_new(key_out).map_err(|e| e.to_string())?;
            write_operators(&file.operators, &operators)?;
            if json {
                print_json(&json!({"name": name, "key": key.key_id(), "role": role, "key_file": key_out}));
            } else {
                println!(
                    "{} `{}` added to {}: key {}; its private key is in {} (give it to them only)",
                    if *console { "console" } else { "operator" },
                    escape(name),
                    file.operators.display(),
                    key.key_id(),
                    key_out.display()
                );
            }
        }
        OperatorsCommand::List { file } => {
            let operators = Operators::load(&file.operators).map_err(|e| e.to_string())?;
            if json {
                print_json(&serde_json::to_value(operators.entries()).unwrap_or(Value::Null));
            } else if operators.entries().is_empty() {
                println!("no operators");
            } else {
                for entry in operators.entries() {
                    let role = match entry.role {
                        OperatorRole::Operator => "operator",
                        OperatorRole::Console => "console",
                    };
                    let state = if entry.revoked { "REVOKED" } else { "active" };
                    println!("{:<20}  {role:<8}  {state:<7}  {}", escape(&entry.name), entry.key);
                }
            }
        }
        OperatorsCommand::Revoke { name, file } => {
            let mut operators = Operators::load(&file.operators).map_err(|e| e.to_string())?;
            if operators.revoke(name) == 0 {
                return Err(format!("no active key listed under `{}` in {}", escape(name), file.operators.display()));
            }
            write_operators(&file.operators, &operators)?;
            if json {
                print_json(&json!({"revoked": name}));
            } else {
                println!(
                    "`{}` revoked in {}: its signatures, past and future, count for nothing once hosts re-read the file",
                    escape(name),
                    file.operators.display()
                );
            }
        }
    }
    Ok(())
}

/// Replaces the operators file (through a temporary file in the same directory, renamed over it).
pub(crate) fn write_operators(path: &std::path::Path, operators: &Operators) -> Result<(), Failure> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let mut temp = path.as_os_str().to_owned();
    temp.push(".new");
    let temp = PathBuf::from(temp);
    let text = format!(
        "# agent-airlock operators: the public keys whose signed decisions hosts count
{}",
        operators.to_toml()
    );
    std::fs::write(&temp, text)
        .and_then(|()| std::fs::rename(&temp, path))
        .map_err(|e| format!("writing {} (in {}): {e}", path.display(), dir.display()))
}
