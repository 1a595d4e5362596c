//! Permission modes (issue 28) and the one table that decides, for a call, whether it runs
//! without asking, asks the owner, or is refused: [`decide`], by mode × what the call is
//! ([`CallClass`], a command with its [`Confinement`]) × whether the owner allowed it ahead.
//!
//! Architecture invariant: nothing else decides whether a call asks. The turn engine asks
//! [`decide`]; the front ends only show and switch the mode; [`unlocking`] reads the same table
//! to tell a headless run what would have let a call through.

use std::fmt;

/// How much runs without asking the owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// Read-only tools only: writes and commands are refused without asking, and the model is
    /// told to propose a plan.
    Plan,
    /// Today's rules: every write and command asks, unless `auto_approve` names its tool or
    /// the owner allowed it for the session.
    #[default]
    Ask,
    /// Edits run without asking; commands ask unless they run confined by the sandbox.
    Edit,
    /// Edits and confined commands run without asking; anything leaving the sandbox asks.
    Auto,
}

impl Mode {
    /// Every mode, from the most to the least careful (the order front ends list them in).
    pub const ALL: [Mode; 4] = [Mode::Plan, Mode::Ask, Mode::Edit, Mode::Auto];

    /// The name the config, the wire and every front end use.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Plan => "plan",
            Mode::Ask => "ask",
            Mode::Edit => "edit",
            Mode::Auto => "auto",
        }
    }

    /// The mode named `name`, if it is one.
    pub fn from_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|mode| mode.as_str() == name)
    }

    /// What the mode lets run without asking, in a line (front ends' pickers show it).
    pub fn description(self) -> &'static str {
        match self {
            Mode::Plan => {
                "Read-only tools only: pen proposes a plan; edits and commands are refused"
            }
            Mode::Ask => "Ask before every edit and command (tools in auto_approve excepted)",
            Mode::Edit => "Edits run without asking; commands ask unless sandboxed",
            Mode::Auto => {
                "Edits and sandboxed commands run without asking; leaving the sandbox asks"
            }
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a command will run with respect to pen_command's sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confinement {
    /// Inside the sandbox: it can write only in the workspace and reach no network.
    Confined,
    /// With the owner's full rights because the sandbox is off or the kernel cannot sandbox.
    Unconfined,
    /// The model asked to run it outside the sandbox (`"sandbox": "off"`): always asks.
    LeavesSandbox,
}

/// What a call is, as the table tells calls apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallClass {
    /// A native tool that only reads (search, list, read, tail, …).
    ReadOnly,
    /// A native tool that writes files, each write recorded for revert (pen_edit, pen_create).
    Edit,
    /// pen_command.
    Command(Confinement),
    /// An MCP server's tool; `read_only_hint` is the server's word that it only reads.
    Mcp { read_only_hint: bool },
}

impl CallClass {
    /// Every class, each confinement of a command included (for exhaustive tests).
    pub const ALL: [CallClass; 7] = [
        CallClass::ReadOnly,
        CallClass::Edit,
        CallClass::Command(Confinement::Confined),
        CallClass::Command(Confinement::Unconfined),
        CallClass::Command(Confinement::LeavesSandbox),
        CallClass::Mcp {
            read_only_hint: true,
        },
        CallClass::Mcp {
            read_only_hint: false,
        },
    ];
}

/// What becomes of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It runs without asking.
    Run,
    /// The owner is asked first.
    Ask,
    /// It is refused without asking (plan mode); the model reads [`refusal`].
    Refuse,
}

/// The decision table. `allowed`: the owner allowed the call's tool ahead (`auto_approve`, or
/// "allow for session"), which the careful modes honour as they always did.
pub fn decide(mode: Mode, class: CallClass, allowed: bool) -> Verdict {
    use CallClass as C;
    use Confinement::*;
    let as_allowed = if allowed { Verdict::Run } else { Verdict::Ask };
    match (mode, class) {
        (_, C::ReadOnly) => Verdict::Run,
        // Leaving the sandbox is the owner's call every time, whatever was allowed ahead.
        (
            Mode::Plan,
            C::Edit
            | C::Command(_)
            | C::Mcp {
                read_only_hint: false,
            },
        ) => Verdict::Refuse,
        (_, C::Command(LeavesSandbox)) => Verdict::Ask,
        (Mode::Edit | Mode::Auto, C::Edit | C::Command(Confined)) => Verdict::Run,
        (
            Mode::Auto,
            C::Mcp {
                read_only_hint: true,
            },
        ) => Verdict::Run,
        (_, C::Edit | C::Command(_) | C::Mcp { .. }) => as_allowed,
    }
}

/// What would have let a call that asked run without asking: the least permissive mode that
/// runs it, else allowing its tool ahead (`auto_approve`), else nothing (it always asks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unlock {
    Mode(Mode),
    AutoApprove,
    Never,
}

/// [`Unlock`] for a call of `class`, read from [`decide`].
pub fn unlocking(class: CallClass) -> Unlock {
    if let Some(mode) = Mode::ALL
        .into_iter()
        .find(|&mode| decide(mode, class, false) == Verdict::Run)
    {
        return Unlock::Mode(mode);
    }
    if Mode::ALL
        .into_iter()
        .any(|mode| decide(mode, class, true) == Verdict::Run)
    {
        return Unlock::AutoApprove;
    }
    Unlock::Never
}

/// What a call of `tool` (of `class`) that needed the owner, who could not be asked, is told:
/// which `--mode` / `PEN_MODE` / config key would have let it run.
pub fn unlock_hint(class: CallClass, tool: &str) -> String {
    match unlocking(class) {
        Unlock::Mode(mode) => format!(
            "mode `{mode}` would have run it without asking: `pen run --mode {mode}`, \
             PEN_MODE={mode}, the config key `mode`, or the editor's mode switch"
        ),
        Unlock::AutoApprove => format!(
            "no mode runs it without asking; the config key `auto_approve` (PEN_AUTO_APPROVE) \
             naming `{tool}` would have"
        ),
        Unlock::Never => {
            "it leaves the sandbox, so it always asks the owner: run it where the owner can answer"
                .to_string()
        }
    }
}

/// The result the model reads for a call plan mode refused.
pub fn refusal(tool: &str) -> String {
    format!(
        "refused in plan mode: the owner set pen to plan mode, where only read-only tools run, so \
         `{tool}` did not run. Do not retry it: read what you need, then answer with a plan (the \
         edits and commands you propose); the owner switches the mode to carry it out"
    )
}

/// The note a prompt in plan mode starts with (a prefix of the prompt's text, so each request
/// stays a prefix of the next and the system prompt and catalog never change with the mode).
pub const PLAN_NOTE: &str = "[pen] Plan mode (for this message): only read-only tools run; edits \
    and commands are refused. Investigate, then answer with a plan: the changes and commands you \
    propose, step by step. The owner will switch the mode to carry it out.";

/// The note a prompt starts with after plan mode ended, so the model knows its plan may now be
/// carried out.
pub fn plan_ended_note(mode: Mode) -> String {
    format!(
        "[pen] Plan mode is over (mode: {mode}): you may edit files and run commands again, as \
         the owner allows."
    )
}

/// The note for a prompt in `mode`, given whether the session's previous prompt was in plan
/// mode.
pub fn prompt_note(mode: Mode, previous_was_plan: bool) -> Option<String> {
    match (mode, previous_was_plan) {
        (Mode::Plan, _) => Some(PLAN_NOTE.to_string()),
        (mode, true) => Some(plan_ended_note(mode)),
        (_, false) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CallClass as C;
    use Confinement::*;
    use Verdict::*;

    /// The whole table, mode by mode, for each class: (not allowed ahead, allowed ahead).
    #[test]
    fn the_decision_table() {
        let hinted = C::Mcp {
            read_only_hint: true,
        };
        let writer = C::Mcp {
            read_only_hint: false,
        };
        #[rustfmt::skip]
        let table: [(C, [(Verdict, Verdict); 4]); 7] = [
            //                       plan             ask          edit         auto
            (C::ReadOnly,              [(Run, Run),       (Run, Run),  (Run, Run),  (Run, Run)]),
            (C::Edit,                  [(Refuse, Refuse), (Ask, Run),  (Run, Run),  (Run, Run)]),
            (C::Command(Confined),     [(Refuse, Refuse), (Ask, Run),  (Run, Run),  (Run, Run)]),
            (C::Command(Unconfined),   [(Refuse, Refuse), (Ask, Run),  (Ask, Run),  (Ask, Run)]),
            (C::Command(LeavesSandbox),[(Refuse, Refuse), (Ask, Ask),  (Ask, Ask),  (Ask, Ask)]),
            (hinted,                   [(Ask, Run),       (Ask, Run),  (Ask, Run),  (Run, Run)]),
            (writer,                   [(Refuse, Refuse), (Ask, Run),  (Ask, Run),  (Ask, Run)]),
        ];
        assert_eq!(
            table.map(|(class, _)| class),
            CallClass::ALL,
            "every class, once"
        );
        for (class, row) in table {
            for (mode, (unallowed, allowed)) in Mode::ALL.into_iter().zip(row) {
                assert_eq!(decide(mode, class, false), unallowed, "{mode} {class:?}");
                assert_eq!(
                    decide(mode, class, true),
                    allowed,
                    "{mode} {class:?} allowed"
                );
            }
        }
    }

    #[test]
    fn ask_is_the_default_and_names_round_trip() {
        assert_eq!(Mode::default(), Mode::Ask);
        for mode in Mode::ALL {
            assert_eq!(Mode::from_name(mode.as_str()), Some(mode));
        }
        assert_eq!(Mode::from_name("allow_edits"), None);
        assert_eq!(Mode::from_name("Plan"), None);
    }

    #[test]
    fn what_would_have_let_a_call_run_is_read_from_the_table() {
        assert_eq!(unlocking(C::Edit), Unlock::Mode(Mode::Edit));
        assert_eq!(unlocking(C::Command(Confined)), Unlock::Mode(Mode::Edit));
        assert_eq!(unlocking(C::Command(Unconfined)), Unlock::AutoApprove);
        assert_eq!(unlocking(C::Command(LeavesSandbox)), Unlock::Never);
        assert_eq!(
            unlocking(C::Mcp {
                read_only_hint: true
            }),
            Unlock::Mode(Mode::Auto)
        );
        let hint = unlock_hint(C::Edit, "pen_edit");
        assert!(
            hint.contains("--mode edit") && hint.contains("PEN_MODE=edit"),
            "{hint}"
        );
        let hint = unlock_hint(C::Command(Unconfined), "pen_command");
        assert!(
            hint.contains("auto_approve") && hint.contains("pen_command"),
            "{hint}"
        );
    }

    #[test]
    fn a_prompt_is_told_plan_mode_and_its_end() {
        assert_eq!(prompt_note(Mode::Plan, false).as_deref(), Some(PLAN_NOTE));
        assert_eq!(prompt_note(Mode::Plan, true).as_deref(), Some(PLAN_NOTE));
        let ended = prompt_note(Mode::Edit, true).unwrap();
        assert!(ended.contains("mode: edit"), "{ended}");
        for mode in [Mode::Ask, Mode::Edit, Mode::Auto] {
            assert_eq!(prompt_note(mode, false), None);
        }
    }
}
