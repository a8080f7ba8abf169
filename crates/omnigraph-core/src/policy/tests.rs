use super::cases::Cases;
use super::{Action, Policy, Request};

const REFERENCE: &str = include_str!("../../../../tests/fixtures/policy/reference.policy.yaml");
const REFERENCE_TESTS: &str = include_str!("../../../../tests/fixtures/policy/reference.policy.tests.yaml");
const REFERENCE_CLUSTER: &str = include_str!("../../../../tests/fixtures/policy/reference.cluster.policy.yaml");

fn policy(source: &str) -> Policy {
    Policy::parse("p.yaml", source).unwrap_or_else(|e| panic!("{e}"))
}

fn allowed(p: &Policy, actor: &str, r: Request) -> bool {
    p.decide(actor, "g", &r).allowed
}

#[test]
fn the_reference_example_bundle_passes_its_documented_tests() {
    let p = policy(REFERENCE);
    let outcomes = Cases::parse("t.yaml", REFERENCE_TESTS).expect("tests").run(&p, "g");
    assert_eq!(outcomes.len(), 2);
    assert!(outcomes.iter().all(|o| o.passed), "{outcomes:?}");
    let alice = &outcomes[0].decision;
    assert_eq!(alice.rule.as_deref(), Some("admins-can-apply-schema"), "{alice:?}");
}

#[test]
fn scopes_follow_the_protected_branches() {
    let p = policy(REFERENCE);
    assert!(allowed(&p, "act-carol", Request::on(Action::Change, "feature")));
    assert!(!allowed(&p, "act-carol", Request::on(Action::Change, "main")), "main is protected");
    assert!(!allowed(&p, "act-carol", Request::of(Action::Read)), "an unprotected scope needs a branch");
    assert!(allowed(&p, "act-dan", Request::into(Action::BranchMerge, Some("feature"), "main")));
    assert!(!allowed(&p, "act-dan", Request::into(Action::BranchMerge, Some("main"), "feature")));
    assert!(!allowed(&p, "act-alice", Request::on(Action::Read, "feature")), "admins were granted schema_apply only");
    assert!(!allowed(&p, "act-alice", Request::into(Action::SchemaApply, None, "feature")));
    assert!(!allowed(&p, "nobody", Request::on(Action::Read, "feature")));
}

#[test]
fn the_server_bundle_grants_graph_list_only() {
    let p = policy(REFERENCE_CLUSTER);
    assert!(allowed(&p, "act-andrew", Request::of(Action::GraphList)));
    assert!(!allowed(&p, "act-andrew", Request::on(Action::Read, "main")));
}

#[test]
fn a_pattern_scope_substitutes_the_caller() {
    let p = policy(
        "version: 1\ngroups:\n  agents: [a1, \"a*\"]\nrules:\n  - id: own-branches\n    allow:\n      actors: { group: agents }\n      actions: [change, read]\n      branch_scope: { pattern: \"agent/{actor}/*\" }\n  - id: listed\n    allow:\n      actors: [rev]\n      actions: [branch_merge]\n      target_branch_scope: any\n",
    );
    assert!(allowed(&p, "a1", Request::on(Action::Change, "agent/a1/task-7")));
    assert!(!allowed(&p, "a1", Request::on(Action::Change, "agent/a2/task-7")), "another agent's branch");
    assert!(!allowed(&p, "a1", Request::on(Action::Change, "main")));
    // An actor's own `*` is literal, not a wildcard.
    assert!(allowed(&p, "a*", Request::on(Action::Change, "agent/a*/x")));
    assert!(!allowed(&p, "a*", Request::on(Action::Change, "agent/a1/x")));
    assert!(allowed(&p, "rev", Request::into(Action::BranchMerge, Some("agent/a1/x"), "main")));
    assert!(!allowed(&p, "rev", Request::on(Action::Change, "main")));
}

#[test]
fn bad_bundles_are_refused_with_their_line_and_reason() {
    let cases = [
        ("version: 2\n", "version must be 1", None),
        (
            "version: 1\nrules:\n  - id: r\n    allow:\n      actors: { group: nope }\n      actions: [read]\n",
            "unknown group `nope`",
            Some(3),
        ),
        (
            "version: 1\ngroups:\n  g: [a]\nrules:\n  - id: r\n    allow:\n      actors: { group: g }\n      actions: [fly]\n",
            "fly",
            None,
        ),
        (
            "version: 1\ngroups:\n  g: [a]\nrules:\n  - id: r\n    allow:\n      actors: { group: g }\n      actions: [read]\n      target_branch_scope: any\n",
            "does not take",
            Some(5),
        ),
        (
            "version: 1\ngroups:\n  g: [a]\nrules:\n  - id: r\n    allow:\n      actors: { group: g }\n      actions: [read, graph_list]\n",
            "graph_list",
            Some(5),
        ),
        (
            "version: 1\ngroups:\n  g: [a]\nrules:\n  - id: r\n    allow:\n      actors: { group: g }\n      actions: [read]\n  - id: r\n    allow:\n      actors: { group: g }\n      actions: [read]\n",
            "used twice",
            Some(5),
        ),
        (
            "version: 1\ngroups:\n  g: [a]\nrules:\n  - id: r\n    allow:\n      actors: { group: g }\n      actions: [read]\n      branch_scope: { pattern: \"x/{who}\" }\n",
            "placeholder",
            Some(5),
        ),
        ("version: 1\nunknown: 1\n", "unknown", None),
        ("version: [\n", "not a policy bundle", None),
    ];
    for (source, reason, line) in cases {
        let err = Policy::parse("p.yaml", source).expect_err(source);
        assert!(err.reason.contains(reason), "{source}: {err}");
        if line.is_some() {
            assert_eq!(err.line, line, "{source}: {err}");
        }
        assert!(err.to_string().starts_with("p.yaml"), "{err}");
    }
}

#[test]
fn every_action_has_one_wire_name() {
    for a in Action::ALL {
        assert_eq!(Action::parse(a.as_str()), Some(a));
        let json = serde_json::to_value(a).expect("json");
        assert_eq!(json, serde_json::json!(a.as_str()));
    }
    assert_eq!(Action::parse("fly"), None);
}
