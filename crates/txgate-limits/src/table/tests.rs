use super::*;

const S: Nanos = 1_000_000_000;

fn limits(calls: u32, burst: u32) -> Limits {
    Limits {
        calls: Rate::new(calls, burst),
        txs: Rate::new(2, 1),
    }
}

#[test]
fn clients_are_limited_apart() {
    let table = Table::new(1000);
    let l = limits(10, 3);
    for _ in 0..3 {
        assert_eq!(table.charge(1, S, &l, 1, 0), (Slot::Own, Ok(())));
    }
    let (slot, refused) = table.charge(1, S, &l, 1, 0);
    assert_eq!(slot, Slot::Own);
    assert_eq!(refused.unwrap_err().which, Which::Calls);
    assert_eq!(table.charge(2, S, &l, 1, 0), (Slot::Own, Ok(())));
}

#[test]
fn submissions_have_their_own_rate_and_a_refusal_charges_nothing() {
    let table = Table::new(1000);
    let l = limits(100, 100);
    table.charge(7, S, &l, 1, 1).1.unwrap();
    let refused = table.charge(7, S, &l, 1, 1).1.unwrap_err();
    assert_eq!(refused.which, Which::Txs);
    assert_eq!(refused.wait, S / 2);
    // The refused call did not use a call slot: 99 more calls fit.
    for _ in 0..99 {
        table.charge(7, S, &l, 1, 0).1.unwrap();
    }
    assert!(table.charge(7, S, &l, 1, 0).1.is_err());
}

#[test]
fn unlimited_clients_are_never_tracked() {
    let table = Table::new(100);
    for key in 0..10_000 {
        assert_eq!(
            table.charge(key, S, &Limits::default(), 5, 5),
            (Slot::Own, Ok(()))
        );
    }
    assert!(table.is_empty());
}

#[test]
fn rotating_addresses_cannot_grow_the_table() {
    let table = Table::new(1000);
    let l = limits(1, 5);
    for key in 0..100_000u128 {
        let _ = table.charge(key, S + key as u64, &l, 1, 0);
    }
    assert!(table.len() <= table.capacity(), "{}", table.len());
    assert!(table.capacity() <= 1000 + 64);
}

#[test]
fn rotating_addresses_cannot_evict_a_backed_off_client_and_share_one_bucket() {
    let table = Table::new(640);
    let l = limits(1, 3);
    let victim_of_its_own_spam = 1u128 << 100;
    for _ in 0..3 {
        table.charge(victim_of_its_own_spam, S, &l, 1, 0).1.unwrap();
    }
    assert!(table.charge(victim_of_its_own_spam, S, &l, 1, 0).1.is_err());
    // 100 000 fresh addresses within the same second.
    let mut shared_passed = 0;
    let mut shared = 0;
    for key in 0..100_000u128 {
        let (slot, result) = table.charge(key, S + 1000 + key as u64, &l, 1, 0);
        if slot == Slot::Shared {
            shared += 1;
            shared_passed += usize::from(result.is_ok());
        }
    }
    assert!(shared > 90_000, "{shared}");
    // The shared buckets let through a burst each, not one per address.
    assert!(shared_passed <= 64 * 3 + 64, "{shared_passed}");
    // The backed-off client is still tracked and still refused.
    assert!(
        table
            .charge(victim_of_its_own_spam, S + S / 2, &l, 1, 0)
            .1
            .is_err()
    );
}

#[test]
fn paid_up_clients_make_room_for_new_ones() {
    let table = Table::new(6400);
    let l = limits(10, 1);
    for key in 0..6400u128 {
        let _ = table.charge(key, S, &l, 1, 0);
    }
    // A second later every one of them is paid up: newcomers get their own
    // entry again (half the capacity, so no shard overflows by chance).
    let own = (10_000..13_200u128)
        .filter(|&key| table.charge(key, 2 * S, &l, 1, 0).0 == Slot::Own)
        .count();
    assert_eq!(own, 3200);
    assert_eq!(table.len(), 3200);
}

#[test]
fn ipv6_clients_are_keyed_by_prefix_and_mapped_ipv4_as_ipv4() {
    let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
    let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
    let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
    assert_eq!(ip_key(a, 64), ip_key(b, 64));
    assert_ne!(ip_key(a, 64), ip_key(c, 64));
    assert_ne!(ip_key(a, 128), ip_key(b, 128));
    assert_eq!(ip_key(a, 0), ip_key(c, 0));
    let v4: IpAddr = "203.0.113.7".parse().unwrap();
    let mapped: IpAddr = "::ffff:203.0.113.7".parse().unwrap();
    assert_eq!(ip_key(v4, 64), ip_key(mapped, 64));
    assert_ne!(ip_key(v4, 64), ip_key("203.0.113.8".parse().unwrap(), 64));
}
