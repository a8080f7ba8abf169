//! Group commit: writes on a busy branch commit together, each keeping its
//! own commit, its own outcome and its place in a linear chain.

use std::collections::{BTreeSet, HashMap};

use omnigraph::{CommitInfo, Graph, MutationRequest, OmniError, ReadTarget, WriteOptions};
use serde_json::Map;

use crate::common::{loaded_social_graph, social_graph};
use crate::writes::assert_consistent;

fn request(source: &str) -> MutationRequest {
    MutationRequest { source: source.to_string(), ..MutationRequest::default() }
}

async fn rows(g: &Graph, source: &str, target: &ReadTarget) -> Vec<Map<String, serde_json::Value>> {
    let r = g.query(source, None, Map::new(), target).await.expect("query");
    omnigraph::result_rows(&r)
}

/// The commits of `branch` from its head down its first parents, newest first.
async fn first_parent_chain(g: &Graph, branch: &str) -> Vec<CommitInfo> {
    let all = g.commits(branch, None).await.expect("commits");
    let by_id: HashMap<&str, &CommitInfo> = all.iter().map(|c| (c.commit_id.as_str(), c)).collect();
    let mut chain = Vec::new();
    let mut at = all.first().map(|c| c.commit_id.clone());
    while let Some(id) = at {
        let c = by_id[id.as_str()];
        chain.push(c.clone());
        at = c.parent_commit_id.clone();
    }
    assert_eq!(chain.len(), all.len(), "the history is not one linear chain");
    chain
}

#[tokio::test]
async fn a_group_commits_each_member_in_order_and_refuses_a_failing_one_alone() {
    let (_dir, g) = loaded_social_graph().await;
    let base = g.commits("main", None).await.expect("commits")[0].commit_id.clone();
    let requests = vec![
        MutationRequest {
            if_commit: Some(base.clone()),
            ..request(r#"query q() { insert Person { name: "Dan", age: 30, email: "dan@example.com" } }"#)
        },
        // Sees Dan, staged by the member before it.
        request(r#"query q() { insert Knows { from: "Dan", to: "Alice" } }"#),
        // Its precondition held before the group, not at its place in the chain.
        MutationRequest { if_commit: Some(base.clone()), ..request(r#"query q() { insert Person { name: "Eve" } }"#) },
        request(r#"query q() { insert Knows { from: "Nobody", to: "Alice" } }"#),
        request(r#"query q() { update Person set { age: 99 } where name = "Nobody" }"#),
        request(r#"query q() { update Person set { age: 31 } where name = "Dan" }"#),
        request(r#"query q() { delete Person where name = "Bob" }"#),
        request(r#"query q() { insert Person { name: "Frank", email: "not-an-email" } }"#),
        request(r#"query q() { insert Company { name: "Initech" } insert WorksAt { from: "Dan", to: "Initech" } }"#),
        request("query q( { broken"),
        // `@unique` against the email member 0 staged.
        request(r#"query q() { insert Person { name: "Gus", email: "dan@example.com" } }"#),
    ];
    let out = g.mutate_many(&requests, &WriteOptions::default()).await.expect("group");
    assert_eq!(out.len(), requests.len());
    let commit = |i: usize| -> String {
        match &out[i] {
            Ok(o) => o.commit_id.clone().unwrap_or_else(|| panic!("member {i} made no commit: {o:?}")),
            Err(e) => panic!("member {i} failed: {e}"),
        }
    };
    let committed: Vec<String> = [0, 1, 5, 8].into_iter().map(commit).collect();
    match &out[2] {
        Err(OmniError::PreconditionFailed { expected, actual }) => {
            assert_eq!((expected, actual), (&base, &committed[1]), "the head just before member 2 is member 1's");
        }
        other => panic!("member 2: {other:?}"),
    }
    assert!(matches!(&out[3], Err(OmniError::BadRequest(m)) if m.contains("Nobody")), "{:?}", out[3]);
    assert!(matches!(&out[4], Ok(o) if o.commit_id.is_none() && o.nodes_affected == 0), "{:?}", out[4]);
    assert!(matches!(&out[6], Err(OmniError::BadRequest(m)) if m.contains("delete")), "{:?}", out[6]);
    assert!(out[7].is_err() && out[9].is_err(), "{:?} {:?}", out[7], out[9]);
    assert!(matches!(&out[10], Err(OmniError::BadRequest(m)) if m.contains("email")), "{:?}", out[10]);
    let own = |i: usize| out[i].as_ref().map(|o| (o.nodes_affected, o.edges_affected)).expect("ok");
    assert_eq!([own(0), own(1), own(5), own(8)], [(1, 0), (0, 1), (1, 0), (1, 1)]);

    // One chain, in arrival order, each member's commit once, the base below them.
    let chain = first_parent_chain(&g, "main").await;
    let newest: Vec<&str> = chain.iter().take(5).map(|c| c.commit_id.as_str()).collect();
    let want: Vec<&str> = committed.iter().rev().map(String::as_str).chain([base.as_str()]).collect();
    assert_eq!(newest, want);
    let versions: BTreeSet<u64> = chain[..4].iter().map(|c| c.manifest_version).collect();
    assert_eq!(versions.len(), 1, "one publish for the group: {chain:?}");
    // Each member's answer carries its own commit row, as the history has it.
    for (i, id) in [0, 1, 5, 8].into_iter().zip(&committed) {
        let row = out[i].as_ref().ok().and_then(|o| o.commit.clone()).expect("member commit row");
        let recorded = chain.iter().find(|c| &c.commit_id == id).expect("in the chain");
        assert_eq!(omnigraph::CommitInfo::from(&row), *recorded, "member {i}");
    }

    let main = ReadTarget::Branch("main".into());
    let people =
        rows(&g, "query q() { match { $p: Person } return { $p.name, $p.age } order { $p.name asc } }", &main).await;
    let names: Vec<&str> = people.iter().filter_map(|r| r["p.name"].as_str()).collect();
    assert_eq!(names, ["Alice", "Bob", "Carol", "Dan"]);
    assert_eq!(people[3]["p.age"], 31);
    let knows =
        rows(&g, r#"query q() { match { $a: Person { name: "Dan" } $a knows $b } return { $b.name } }"#, &main).await;
    assert_eq!(knows.len(), 1);
    // The members became visible together: the first one's commit reads the whole group.
    let at_first =
        rows(&g, "query q() { match { $c: Company } return { $c.name } }", &ReadTarget::Commit(committed[0].clone()))
            .await;
    assert!(at_first.iter().any(|r| r["c.name"] == "Initech"), "{at_first:?}");
    assert_consistent(&g).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_on_one_branch_commit_once_each_in_one_linear_chain() {
    let (_dir, g) = social_graph().await;
    let before = g.commits("main", None).await.expect("commits").len();
    let (writers, each) = (32usize, 3usize);
    let handles: Vec<_> = (0..writers)
        .map(|i| {
            let g = g.clone();
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for k in 0..each {
                    let src = format!(r#"query q() {{ insert Person {{ name: "w{i}-{k}", age: 1 }} }}"#);
                    let o = g.mutate(&src, None, Map::new(), &WriteOptions::default()).await.expect("write");
                    assert_eq!(o.nodes_affected, 1);
                    ids.push(o.commit_id.expect("a commit"));
                }
                ids
            })
        })
        .collect();
    let mut acknowledged = Vec::new();
    for h in handles {
        acknowledged.extend(h.await.expect("writer"));
    }
    let chain = first_parent_chain(&g, "main").await;
    assert_eq!(chain.len(), before + writers * each, "one commit per acknowledged write");
    let in_chain: HashMap<&str, usize> = chain.iter().fold(HashMap::new(), |mut m, c| {
        *m.entry(c.commit_id.as_str()).or_default() += 1;
        m
    });
    for id in &acknowledged {
        assert_eq!(in_chain.get(id.as_str()), Some(&1), "{id} is not in the chain exactly once");
    }
    let publishes: BTreeSet<u64> = chain[..writers * each].iter().map(|c| c.manifest_version).collect();
    assert!(publishes.len() < writers * each, "no two writes shared a publish: no group formed");
    let main = ReadTarget::Branch("main".into());
    let people = rows(&g, "query q() { match { $p: Person } return { $p.name } }", &main).await;
    assert_eq!(people.len(), writers * each);
    assert_consistent(&g).await;
    println!("{} writes in {} publishes", writers * each, publishes.len());
}

/// Two members the per-table admission limits admit alone but not together
/// commit in two groups, in arrival order: by entities (each updates 5,000
/// rows of the 8,192 a table may stage) and by staged bytes (each inserts a
/// 10 MiB value: alone its Arrow buffers stay under the 32 MiB a table may
/// stage, together they pass it).
#[tokio::test]
async fn members_over_the_admission_limits_together_commit_in_separate_groups() {
    let (_dir, g) = social_graph().await;
    let lines: String = (0..10_000)
        .map(|i| format!("{{\"type\": \"Person\", \"data\": {{\"name\": \"p{i}\", \"age\": {}}}}}\n", 1 + i % 2))
        .collect();
    g.load(lines.as_bytes(), omnigraph::LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    let by_entities = vec![
        request(r#"query q() { update Person set { age: 3 } where age = 1 }"#),
        request(r#"query q() { update Person set { age: 4 } where age = 2 }"#),
    ];
    let big = |c: char| {
        let mut params = Map::new();
        params.insert("n".into(), c.to_string().repeat(10 << 20).into());
        MutationRequest { params, ..request("query q($n: String) { insert Company { name: $n } }") }
    };
    for (what, requests) in [("entities", by_entities), ("bytes", vec![big('a'), big('b')])] {
        let out = g.mutate_many(&requests, &WriteOptions::default()).await.expect("group");
        let ids: Vec<String> =
            out.iter().map(|o| o.as_ref().expect("member").commit_id.clone().expect("commit")).collect();
        let chain = first_parent_chain(&g, "main").await;
        assert_eq!([&chain[1].commit_id, &chain[0].commit_id], [&ids[0], &ids[1]], "{what}: arrival order");
        assert_ne!(chain[0].manifest_version, chain[1].manifest_version, "{what}: one group took both");
    }
    let main = ReadTarget::Branch("main".into());
    let ages = rows(&g, "query q() { match { $p: Person { age: 3 } } return { $p.name } }", &main).await;
    assert_eq!(ages.len(), 5_000);
    assert_consistent(&g).await;
}

/// Each member's rows are probed against committed ones on their own, with
/// every row the group already rewrote seen at its new values: a value an
/// earlier member released is free, one a committed row still holds is not.
#[tokio::test]
async fn a_member_may_take_a_unique_value_an_earlier_member_released() {
    let (_dir, g) = loaded_social_graph().await;
    let requests = vec![
        request(r#"query q() { update Person set { email: "alice@new.example" } where name = "Alice" }"#),
        request(r#"query q() { insert Person { name: "Ann", email: "alice@example.com" } }"#),
        request(r#"query q() { insert Person { name: "Al", email: "alice@new.example" } }"#),
        request(r#"query q() { insert Person { name: "Bo", email: "bob@example.com" } }"#),
        // Rewrites Ann (staged by member 1), then is refused: Ann is as member 1 left her.
        request(r#"query q() { update Person set { email: "bob@example.com" } where name = "Ann" }"#),
    ];
    let out = g.mutate_many(&requests, &WriteOptions::default()).await.expect("group");
    assert!(out[0].is_ok() && out[1].is_ok(), "{:?} {:?}", out[0], out[1]);
    assert!(matches!(&out[2], Err(OmniError::BadRequest(m)) if m.contains("email")), "{:?}", out[2]);
    assert!(matches!(&out[3], Err(OmniError::BadRequest(m)) if m.contains("`Bob`")), "{:?}", out[3]);
    assert!(matches!(&out[4], Err(OmniError::BadRequest(m)) if m.contains("`Bob`")), "{:?}", out[4]);
    let main = ReadTarget::Branch("main".into());
    let emails = rows(&g, "query q() { match { $p: Person } return { $p.name, $p.email } }", &main).await;
    let of = |name: &str| {
        emails.iter().find(|r| r["p.name"] == name).map(|r| r["p.email"].clone()).unwrap_or(serde_json::Value::Null)
    };
    assert_eq!((of("Alice"), of("Ann")), ("alice@new.example".into(), "alice@example.com".into()));
    assert!(of("Al").is_null() && of("Bo").is_null(), "refused members wrote nothing: {emails:?}");
    assert_consistent(&g).await;
}
