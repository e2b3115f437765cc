//! The status document kept as rendered pieces, brought up to date from
//! the change log instead of being read and rendered whole for each
//! request.
//!
//! Every machine and unit is kept as its own JSON object, rendered when it
//! changes. Answering a request is then a matter of joining the pieces,
//! nesting containers under their hosts and subordinate units under their
//! principals, and rendering the few parts that depend on many entities
//! (the model, and each application with its relations and the most severe
//! status of its units).
//!
//! # Guarantees
//!
//! [`StatusDocument::render`] is the same JSON value as
//! [`status_view`](crate::status::view::status_view) of a snapshot at the
//! document's revision (only the order of keys within an object may
//! differ). A unit's piece depends on its machine's state, so when a
//! machine's state changes, the pieces of the units on it are rendered
//! again.

use std::borrow::Borrow;
use std::cell::{Ref, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use actix_web::web::Bytes;

use crate::domain::instance_types::HourlyPrice;
use crate::domain::machine::MachineState;
use crate::domain::names::{ApplicationName, MachineId, UnitName};
use crate::status::cores;
use crate::status::filter::{FilterError, MachineRanges, StatusFilter};
use crate::status::rendering::{
    Cuts, Label, Placed, Placements, Rendering, Segmenter, Whole, BLOCK,
};
use crate::status::snapshot::{MachineShown, StatusDelta, StatusSnapshot, UnitShown};
use crate::status::view::{
    application_headers, machine_view, model_view, severity, unit_view, MachineSeen, SEVERITIES,
};
use crate::store::records::{ApplicationRecord, ModelRecord, RelationRecord};

/// A rendered object member, `"key":{...}`, kept whole so that joining
/// members costs a copy and nothing more.
struct Member {
    /// Its JSON: bytes of its own when rendered, and, once a rendering in
    /// segments has written it whole, the same bytes within that
    /// rendering's segment ([`Placed`]), so that the document and the
    /// rendering hold one copy. (Behind a lock, as unit pieces are made on
    /// every core looking at machine pieces; never contended.)
    text: Mutex<Bytes>,
    /// Where the value starts, after the key and colon.
    value_at: usize,
}

impl Member {
    fn of<T: serde::Serialize>(key: &str, value: &T) -> Member {
        let mut text = to_json(&key).into_string();
        text.push(':');
        let value_at = text.len();
        text.push_str(&to_json(value));
        Member::with_text(text.into_bytes(), value_at)
    }

    fn with_text(text: Vec<u8>, value_at: usize) -> Member {
        Member {
            // A boxed slice holds no spare room, and becomes bytes
            // without another allocation.
            text: Mutex::new(Bytes::from(text.into_boxed_slice())),
            value_at,
        }
    }

    fn text(&self) -> MutexGuard<'_, Bytes> {
        self.text.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn len(&self) -> usize {
        self.text().len()
    }

    /// `write` of the member's `"key":` and its value.
    fn with_parts<R>(&self, write: impl FnOnce(&[u8], &[u8]) -> R) -> R {
        let text = self.text();
        let (key, value) = text.split_at(self.value_at);
        write(key, value)
    }
}

impl Placed for Member {
    fn place(&self, bytes: Bytes) {
        let mut text = self.text();
        debug_assert_eq!(bytes, *text, "a piece's bytes as written");
        *text = bytes;
    }
}

/// A machine's rendered view (without its containers) and its state.
struct MachinePiece {
    state: MachineState,
    since_ms: i64,
    hourly_price: Option<HourlyPrice>,
    member: Member,
}

impl MachinePiece {
    fn seen(&self) -> MachineSeen {
        MachineSeen {
            state: self.state,
            since_ms: self.since_ms,
        }
    }

    fn of(machine: &MachineShown) -> MachinePiece {
        MachinePiece {
            state: machine.state,
            since_ms: machine.since_ms,
            hourly_price: machine.hourly_price,
            member: Member::of(&machine.id.to_string(), &machine_view(machine)),
        }
    }
}

/// A unit's rendered view (without its subordinates), what it was made
/// from, and how severe its workload status is. Its application's status
/// is the most severe unit's, whose view is made again from the unit when
/// the application's header is: keeping every unit's status besides its
/// rendering would cost as much again as the rendering's text.
struct UnitPiece {
    unit: UnitShown,
    severity: usize,
    member: Member,
}

/// The state of `unit`'s machine among `machines`, as its view shows it.
fn seen_on(unit: &UnitShown, machines: &BTreeMap<MachineId, MachinePiece>) -> Option<MachineSeen> {
    unit.machine
        .and_then(|m| machines.get(&m))
        .map(MachinePiece::seen)
}

impl UnitPiece {
    fn of(unit: UnitShown, machine: Option<MachineSeen>) -> UnitPiece {
        let view = unit_view(&unit, machine);
        UnitPiece {
            severity: severity(&view.workload_status.current),
            member: Member::of(&unit.name.to_string(), &view),
            unit,
        }
    }

    /// Renders the piece again for its machine's new state.
    fn render(&mut self, machine: Option<MachineSeen>) {
        let view = unit_view(&self.unit, machine);
        let mut text = self.member.with_parts(|key, _| key.to_vec());
        text.extend_from_slice(to_json(&view).as_bytes());
        self.member = Member::with_text(text, self.member.value_at);
        self.severity = severity(&view.workload_status.current);
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Box<str> {
    // The views hold strings and maps with string keys only, which always
    // serialize.
    serde_json::to_string(value)
        .unwrap_or_else(|e| unreachable!("a status view always serializes: {e}"))
        .into_boxed_str()
}

/// The status at one revision, as pieces.
pub struct StatusDocument {
    revision: i64,
    cloud: String,
    model: ModelRecord,
    /// Hosts and containers alike; in id order a host's containers follow it.
    machines: BTreeMap<MachineId, MachinePiece>,
    applications: BTreeMap<ApplicationName, ApplicationRecord>,
    /// In unit order: by application, then number.
    units: BTreeMap<UnitName, UnitPiece>,
    /// The units on each machine, to render again when its state changes.
    /// A tree in machine order, like `machines`: a whole read fills both
    /// in the same order, and costs are counted walking it, where a hash
    /// table would be probed at random (with a million machines, half the
    /// time a whole read took to take the units in).
    units_on: BTreeMap<MachineId, NameSet>,
    /// The subordinate units of each principal unit.
    subordinates_of: BTreeMap<UnitName, NameSet>,
    /// How many machines are in each state.
    in_state: HashMap<MachineState, usize>,
    /// What every machine's instance costs an hour together, in millionths
    /// of a dollar: kept as machines change, so that `/metrics` and the
    /// model's view do not add up every machine.
    hourly_cost: u64,
    relations: BTreeMap<String, RelationRecord>,
    /// Each application's view without units, rendered (see
    /// [`StatusDocument::headers`]), and which of them changes have made
    /// stale.
    headers: RefCell<BTreeMap<ApplicationName, Box<str>>>,
    stale_headers: RefCell<StaleHeaders>,
    /// What each application's header takes from all its units, kept as
    /// they change ([`UnitsFold`]).
    folds: HashMap<ApplicationName, UnitsFold>,
    /// The blocks changes have touched since the rendering in segments
    /// this document made last (see [`StatusDocument::render_segments`]).
    touched: RefCell<Touched>,
    /// How many machines, units and machines with units their trees held
    /// when last built full (see `pack`, and `fill_machines`).
    packed: [usize; 3],
}

/// The fewest entries a tree of machines or units is built again full at.
const PACK_AT_LEAST: usize = 4096;

/// Which blocks of machines and units ([`BLOCK`]s) changes have touched
/// since the rendering `since` was made; a block not touched renders the
/// same bytes as it did then.
#[derive(Default)]
struct Touched {
    /// The [`Rendering::generation`] these are relative to; `None` when
    /// no rendering in segments has been made, so that all are touched.
    since: Option<u64>,
    all: bool,
    machines: HashSet<u64>,
    units: HashSet<(ApplicationName, u64)>,
}

impl Touched {
    fn machine(&mut self, id: MachineId) {
        self.machines.insert(id.host_number() / BLOCK);
    }

    fn unit(&mut self, name: &UnitName) {
        self.units
            .insert((name.application().clone(), name.number() / BLOCK));
    }

    fn holds_machines(&self, block: u64) -> bool {
        self.all || self.machines.contains(&block)
    }

    fn holds_units(&self, application: &ApplicationName, block: u64) -> bool {
        self.all || self.units.contains(&(application.clone(), block))
    }
}

/// The application headers to make again before the next rendering.
#[derive(Default)]
struct StaleHeaders {
    all: bool,
    applications: BTreeSet<ApplicationName>,
}

impl StaleHeaders {
    fn is_empty(&self) -> bool {
        !self.all && self.applications.is_empty()
    }
}

/// What an application's header takes from all its units, kept as units
/// and machines change, so that making the header again costs in
/// proportion to what changed and not to how many units it has.
#[derive(Default)]
struct UnitsFold {
    /// How many of its units' workload statuses have each severity.
    severities: [usize; SEVERITIES],
    /// What the machines its principal units are on cost an hour
    /// together, each machine once, in millionths of a dollar.
    cost: u64,
}

impl UnitsFold {
    /// The most severe rank any of its units has.
    fn worst(&self) -> Option<usize> {
        self.severities.iter().rposition(|n| *n > 0)
    }

    fn is_empty(&self) -> bool {
        self.cost == 0 && self.severities.iter().all(|n| *n == 0)
    }
}

/// Changes `application`'s fold, made empty if it has none yet (its name
/// is copied only then).
fn update_fold(
    folds: &mut HashMap<ApplicationName, UnitsFold>,
    application: &ApplicationName,
    update: impl FnOnce(&mut UnitsFold),
) {
    match folds.get_mut(application) {
        Some(fold) => update(fold),
        None => update(folds.entry(application.clone()).or_default()),
    }
}

/// Counts a unit piece of `application` of severity `rank` in or out.
fn count_severity(
    folds: &mut HashMap<ApplicationName, UnitsFold>,
    application: &ApplicationName,
    rank: usize,
    counted: bool,
) {
    update_fold(folds, application, |fold| {
        if let Some(n) = fold.severities.get_mut(rank) {
            *n = if counted { *n + 1 } else { n.saturating_sub(1) };
        }
    });
}

/// Counts what `machines` cost the applications whose principal units
/// are on them in (`counted`) or out: each machine's price once for each
/// application with a principal unit on it.
fn count_costs(
    folds: &mut HashMap<ApplicationName, UnitsFold>,
    machine_pieces: &BTreeMap<MachineId, MachinePiece>,
    unit_pieces: &BTreeMap<UnitName, UnitPiece>,
    units_on: &BTreeMap<MachineId, NameSet>,
    machines: impl IntoIterator<Item = MachineId>,
    counted: bool,
) {
    let mut paying: Vec<&ApplicationName> = Vec::new();
    for machine in machines {
        let Some(price) = machine_pieces
            .get(&machine)
            .and_then(|piece| piece.hourly_price)
        else {
            continue;
        };
        let principals = units_on
            .get(&machine)
            .into_iter()
            .flatten()
            .filter(|unit| {
                unit_pieces
                    .get(*unit)
                    .is_some_and(|piece| piece.unit.principal.is_none())
            })
            .map(UnitName::application);
        charge(folds, &mut paying, principals, price, counted);
    }
}

/// Counts `price` in (`counted`) or out once for each application among
/// `principals`, the applications of a machine's principal units;
/// `paying` is room to find them in, kept from one machine to the next.
fn charge<'a>(
    folds: &mut HashMap<ApplicationName, UnitsFold>,
    paying: &mut Vec<&'a ApplicationName>,
    principals: impl Iterator<Item = &'a ApplicationName>,
    price: HourlyPrice,
    counted: bool,
) {
    paying.clear();
    for application in principals {
        if !paying.contains(&application) {
            paying.push(application);
        }
    }
    for application in paying.iter() {
        update_fold(folds, application, |fold| {
            fold.cost = if counted {
                fold.cost.saturating_add(price.micro_usd())
            } else {
                fold.cost.saturating_sub(price.micro_usd())
            };
        });
    }
}

/// What each machine costs the applications of its principal units, as
/// [`count_costs`] counts it in, for units given as (machine, name, whether
/// principal) in machine order: in one pass beside the machines, which are
/// in that order too, rather than a lookup of each machine and unit (a
/// quarter of a second with a million).
fn count_costs_in_order(
    folds: &mut HashMap<ApplicationName, UnitsFold>,
    machine_pieces: &BTreeMap<MachineId, MachinePiece>,
    on: &[(MachineId, UnitName, bool)],
) {
    let mut machines = machine_pieces.iter().peekable();
    let mut paying: Vec<&ApplicationName> = Vec::new();
    for group in on.chunk_by(|a, b| a.0 == b.0) {
        let machine = group[0].0;
        while machines.next_if(|(id, _)| **id < machine).is_some() {}
        let Some(price) = machines
            .peek()
            .filter(|(id, _)| **id == machine)
            .and_then(|(_, piece)| piece.hourly_price)
        else {
            continue;
        };
        let principals = group
            .iter()
            .filter(|(_, _, principal)| *principal)
            .map(|(_, unit, _)| unit.application());
        charge(folds, &mut paying, principals, price, true);
    }
}

impl StatusDocument {
    /// An empty document; [`apply`](StatusDocument::apply) the whole
    /// state to it ([`Store::status_shown`](crate::store::Store::status_shown)).
    pub fn new(cloud: &str) -> StatusDocument {
        StatusDocument {
            revision: 0,
            cloud: cloud.to_string(),
            model: ModelRecord::default(),
            machines: BTreeMap::new(),
            applications: BTreeMap::new(),
            units: BTreeMap::new(),
            units_on: BTreeMap::new(),
            subordinates_of: BTreeMap::new(),
            in_state: HashMap::new(),
            hourly_cost: 0,
            relations: BTreeMap::new(),
            headers: RefCell::new(BTreeMap::new()),
            stale_headers: RefCell::new(StaleHeaders {
                all: true,
                applications: BTreeSet::new(),
            }),
            folds: HashMap::new(),
            touched: RefCell::new(Touched::default()),
            packed: [0, 0, 0],
        }
    }

    /// The document of a whole snapshot.
    pub fn of(snapshot: &StatusSnapshot, cloud: &str) -> StatusDocument {
        let mut document = StatusDocument::new(cloud);
        document.apply(StatusDelta::of(snapshot));
        document
    }

    /// The change-log revision the document reflects.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// How many machines and units the document holds.
    pub fn len(&self) -> usize {
        self.machines.len() + self.units.len()
    }

    /// How many machines are in `state`.
    pub fn machines_in(&self, state: MachineState) -> usize {
        self.in_state.get(&state).copied().unwrap_or(0)
    }

    /// What every machine's instance costs an hour together.
    pub fn hourly_cost(&self) -> HourlyPrice {
        HourlyPrice::from_micro_usd(self.hourly_cost)
    }

    /// Whether the document holds no machine and no unit.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Brings the document up to the delta's revision.
    pub fn apply(&mut self, delta: StatusDelta) {
        // An empty document takes a whole read in at once (see
        // `fill_machines`).
        let filling = self.is_empty();
        self.mark_stale_headers(&delta);
        self.mark_touched(&delta);
        // The machines whose cost to their applications the delta may
        // change, counted out before and in again after; every machine
        // with units, in order, when the delta fills an empty document.
        let costed = (!filling).then(|| self.machines_costed_by(&delta));
        if let Some(machines) = &costed {
            count_costs(
                &mut self.folds,
                &self.machines,
                &self.units,
                &self.units_on,
                machines.iter().copied(),
                false,
            );
        }
        self.revision = self.revision.max(delta.revision);
        if let Some(model) = delta.model {
            self.model = model;
        }
        for (name, application) in delta.applications {
            match application {
                Some(application) => self.applications.insert(name, application),
                None => self.applications.remove(&name),
            };
        }
        for (key, relation) in delta.relations {
            match relation {
                Some(relation) => self.relations.insert(key, relation),
                None => self.relations.remove(&key),
            };
        }
        let mut machines = delta.machines;
        let pieces = make_pieces(&mut machines, |(_, machine)| {
            machine.as_ref().map(MachinePiece::of)
        });
        let machines = machines.into_iter().map(|(id, _)| id).zip(pieces);
        let moved = if filling {
            self.fill_machines(machines);
            Vec::new()
        } else {
            self.insert_machines(machines)
        };
        // Units already here whose machine's state changed; units in the
        // delta are rendered below with their machine's new state.
        let touched = self.touched.get_mut();
        for machine in moved {
            let state = self.machines.get(&machine).map(MachinePiece::seen);
            for name in self.units_on.get(&machine).into_iter().flatten() {
                if let Some(piece) = self.units.get_mut(name) {
                    count_severity(&mut self.folds, name.application(), piece.severity, false);
                    piece.render(state);
                    count_severity(&mut self.folds, name.application(), piece.severity, true);
                    touched.unit(name);
                    if let Some(principal) = &piece.unit.principal {
                        touched.unit(principal);
                    }
                }
            }
        }
        let on = &self.machines;
        let mut units = delta.units;
        let pieces = make_pieces(&mut units, |(_, unit)| {
            let unit = unit.take()?;
            let machine = seen_on(&unit, on);
            Some(UnitPiece::of(unit, machine))
        });
        let units = units.into_iter().map(|(name, _)| name).zip(pieces);
        if filling {
            self.fill_units(units);
        } else {
            self.insert_units(units);
        }
        // A filled document's costs were counted as its units went in.
        if let Some(machines) = costed {
            count_costs(
                &mut self.folds,
                &self.machines,
                &self.units,
                &self.units_on,
                machines,
                true,
            );
        }
        self.folds.retain(|_, fold| !fold.is_empty());
        self.pack();
    }

    /// Puts the pieces of `machines` in (a machine without one is taken
    /// out) and counts them by state and price; returns the machines whose
    /// state changed.
    fn insert_machines(
        &mut self,
        machines: impl Iterator<Item = (MachineId, Option<MachinePiece>)>,
    ) -> Vec<MachineId> {
        let mut moved = Vec::new();
        for (id, piece) in machines {
            let before = match piece {
                Some(piece) => self.machines.insert(id, piece),
                None => self.machines.remove(&id),
            };
            let after = self.machines.get(&id);
            let price = |m: Option<&MachinePiece>| {
                m.and_then(|m| m.hourly_price)
                    .map_or(0, HourlyPrice::micro_usd)
            };
            self.hourly_cost =
                (self.hourly_cost + price(after)).saturating_sub(price(before.as_ref()));
            let before = before.map(|m| m.state);
            let after = after.map(|m| m.state);
            if before != after {
                moved.push(id);
                if let Some(state) = before {
                    if let Some(count) = self.in_state.get_mut(&state) {
                        *count = count.saturating_sub(1);
                    }
                }
                if let Some(state) = after {
                    *self.in_state.entry(state).or_default() += 1;
                }
            }
        }
        moved
    }

    /// Puts the pieces of `units` in (a unit without one is taken out),
    /// counts them, and notes the machine each is on and the principal
    /// each is under.
    fn insert_units(&mut self, units: impl Iterator<Item = (UnitName, Option<UnitPiece>)>) {
        for (name, piece) in units {
            let now_on = piece.as_ref().and_then(|p| p.unit.machine);
            let now_under = piece.as_ref().and_then(|p| p.unit.principal.clone());
            if let Some(piece) = &piece {
                count_severity(&mut self.folds, name.application(), piece.severity, true);
            }
            let before = match piece {
                Some(piece) => self.units.insert(name.clone(), piece),
                None => self.units.remove(&name),
            };
            if let Some(before) = before {
                count_severity(&mut self.folds, name.application(), before.severity, false);
                if let Some(was_on) = before.unit.machine {
                    forget(&mut self.units_on, &was_on, &name);
                }
                if let Some(was_under) = &before.unit.principal {
                    forget(&mut self.subordinates_of, was_under, &name);
                }
            }
            if let Some(principal) = now_under {
                self.subordinates_of
                    .entry(principal)
                    .or_default()
                    .insert(name.clone());
            }
            if let Some(machine) = now_on {
                self.units_on.entry(machine).or_default().insert(name);
            }
        }
    }

    /// Takes in the pieces of an empty document's machines at once (a
    /// whole read, where each machine comes once): the tree is built full
    /// from them, as `pack` builds it, instead of each being inserted.
    fn fill_machines(&mut self, machines: impl Iterator<Item = (MachineId, Option<MachinePiece>)>) {
        let mut entries = Vec::with_capacity(machines.size_hint().0);
        for (id, piece) in machines {
            let Some(piece) = piece else {
                continue;
            };
            let price = piece.hourly_price.map_or(0, HourlyPrice::micro_usd);
            self.hourly_cost = self.hourly_cost.saturating_add(price);
            *self.in_state.entry(piece.state).or_default() += 1;
            entries.push((id, piece));
        }
        self.machines = BTreeMap::from_iter(entries);
        self.packed[0] = self.machines.len();
    }

    /// Takes in the pieces of an empty document's units at once, as
    /// [`StatusDocument::fill_machines`] does its machines (which are in
    /// already), the units on each machine with them, and what each
    /// machine costs the applications of its principal units.
    fn fill_units(&mut self, units: impl Iterator<Item = (UnitName, Option<UnitPiece>)>) {
        let mut entries = Vec::with_capacity(units.size_hint().0);
        let mut on = Vec::with_capacity(units.size_hint().0);
        for (name, piece) in units {
            let Some(piece) = piece else {
                continue;
            };
            count_severity(&mut self.folds, name.application(), piece.severity, true);
            let principal = piece.unit.principal.is_none();
            if let Some(principal) = &piece.unit.principal {
                self.subordinates_of
                    .entry(principal.clone())
                    .or_default()
                    .insert(name.clone());
            }
            if let Some(machine) = piece.unit.machine {
                on.push((machine, name.clone(), principal));
            }
            entries.push((name, piece));
        }
        self.units = BTreeMap::from_iter(entries);
        on.sort_unstable();
        count_costs_in_order(&mut self.folds, &self.machines, &on);
        let mut units_on: Vec<(MachineId, NameSet)> = Vec::new();
        for (machine, name, _) in on {
            match units_on.last_mut() {
                Some((last, names)) if *last == machine => names.insert(name),
                _ => {
                    let mut names = NameSet::default();
                    names.insert(name);
                    units_on.push((machine, names));
                }
            }
        }
        self.units_on = BTreeMap::from_iter(units_on);
        self.packed[1] = self.units.len();
        self.packed[2] = self.units_on.len();
    }

    /// The machines whose cost to their applications `delta` may change:
    /// the machines it changes, and those the units it changes are on
    /// before and after.
    fn machines_costed_by(&self, delta: &StatusDelta) -> Vec<MachineId> {
        let mut machines: Vec<MachineId> = delta.machines.iter().map(|(id, _)| *id).collect();
        for (name, unit) in &delta.units {
            let before = self.units.get(name).and_then(|piece| piece.unit.machine);
            let after = unit.as_ref().and_then(|unit| unit.machine);
            machines.extend(before.into_iter().chain(after));
        }
        machines.sort_unstable();
        machines.dedup();
        machines
    }

    /// Builds the trees of machines, of units and of the units on each
    /// machine again, full, each time one has grown by a quarter: a tree
    /// grown in key order, as a deploy grows them, leaves its nodes little
    /// more than half full, and their
    /// entries are large (with 100,000 units, about 20 MB of room never
    /// used). Built from sorted entries, every node is full.
    ///
    /// The entries stream from the old tree into the new: `append` to a
    /// tree of the first entry merges the two in order into new full nodes
    /// as the old ones are let go. (`collect` would first gather every
    /// entry into a vector and sort it, briefly holding twice the tree.)
    fn pack(&mut self) {
        fn pack_tree<K: Ord, V>(tree: &mut BTreeMap<K, V>, packed: &mut usize) {
            if tree.len() >= PACK_AT_LEAST && tree.len() >= *packed + *packed / 4 {
                if let Some(first) = tree.pop_first() {
                    let mut full = BTreeMap::from([first]);
                    full.append(tree);
                    *tree = full;
                }
                *packed = tree.len();
            }
        }
        let [machines, units, units_on] = &mut self.packed;
        pack_tree(&mut self.machines, machines);
        pack_tree(&mut self.units, units);
        pack_tree(&mut self.units_on, units_on);
    }

    /// Notes the application headers `delta` changes: those of the
    /// applications it changes and of the applications related to them
    /// (whose relations name them), of both sides of the relations it
    /// changes, of the units it changes, and of the units on the machines
    /// it changes (a machine's state moves its units' status, its price
    /// their application's cost).
    fn mark_stale_headers(&self, delta: &StatusDelta) {
        let mut stale = self.stale_headers.borrow_mut();
        if stale.all {
            return;
        }
        let mut mark = |name: &ApplicationName| {
            if !stale.applications.contains(name) {
                stale.applications.insert(name.clone());
            }
        };
        let mut mark_sides = |relation: &RelationRecord| {
            for side in [&relation.app1, &relation.app2] {
                if let Ok(name) = side.parse::<ApplicationName>() {
                    mark(&name);
                }
            }
        };
        for (name, _) in &delta.applications {
            for relation in self.relations.values() {
                if relation.app1 == name.as_str() || relation.app2 == name.as_str() {
                    mark_sides(relation);
                }
            }
        }
        for (key, relation) in &delta.relations {
            if let Some(before) = self.relations.get(key) {
                mark_sides(before);
            }
            if let Some(after) = relation {
                mark_sides(after);
            }
        }
        for (name, _) in &delta.applications {
            mark(name);
        }
        for (name, _) in &delta.units {
            mark(name.application());
        }
        for (machine, _) in &delta.machines {
            for name in self.units_on.get(machine).into_iter().flatten() {
                mark(name.application());
            }
        }
    }

    /// Notes the blocks `delta` touches (before it is applied): each
    /// machine's; each unit's, its principal's (before and after), under
    /// which a subordinate is written, and its subordinates' (which are
    /// written among their own application's units when it goes). A
    /// change to an application or the model touches them all. The
    /// units on machines whose state changes are noted as they are
    /// rendered again.
    fn mark_touched(&mut self, delta: &StatusDelta) {
        let touched = self.touched.get_mut();
        if touched.all {
            return;
        }
        if !delta.applications.is_empty() {
            touched.all = true;
            return;
        }
        for (id, _) in &delta.machines {
            touched.machine(*id);
        }
        for (name, unit) in &delta.units {
            touched.unit(name);
            let before = self.units.get(name).and_then(|p| p.unit.principal.as_ref());
            let after = unit.as_ref().and_then(|u| u.principal.as_ref());
            for principal in before.into_iter().chain(after) {
                touched.unit(principal);
            }
            for subordinate in self.subordinates_of.get(name).into_iter().flatten() {
                touched.unit(subordinate);
            }
        }
    }

    /// The whole status as JSON.
    pub fn render(&self) -> Vec<u8> {
        let pieces: usize = self
            .machines
            .values()
            .map(|m| m.member.len() + 16)
            .sum::<usize>()
            + self
                .units
                .values()
                .map(|u| u.member.len() + 24)
                .sum::<usize>();
        let mut out = Vec::with_capacity(pieces + 4096);
        self.render_into(&mut out, &mut Whole, |_| false, None);
        out
    }

    /// The whole status as JSON in segments, sharing with `previous` the
    /// segments that come out the same (see [`crate::status::rendering`]):
    /// the memory of both is what they do not share, and a gzip of it
    /// compresses only the new segments. When `previous` is the last
    /// rendering in segments this document made, the blocks no change has
    /// touched since are taken from it without being written again, so
    /// the rendering costs what changed.
    pub fn render_segments(&self, previous: Option<Arc<Rendering>>) -> Rendering {
        let touched = std::mem::take(&mut *self.touched.borrow_mut());
        let trusted =
            touched.since.is_some() && touched.since == previous.as_ref().map(|p| p.generation());
        let placements = Placements::default();
        let mut segmenter = Segmenter::after(previous).placing(&placements);
        let mut out = Vec::with_capacity(1 << 18);
        let skip = |label: &Label| {
            trusted
                && match label {
                    Label::Machines { block, .. } => !touched.holds_machines(*block),
                    Label::Units {
                        application, block, ..
                    } => !touched.holds_units(application, *block),
                    _ => false,
                }
        };
        self.render_into(&mut out, &mut segmenter, skip, Some(&placements));
        let rendering = segmenter.finish(&mut out);
        self.touched.borrow_mut().since = Some(rendering.generation());
        rendering
    }

    /// Writes the whole status into `out` block by block, telling `cuts`
    /// where segments start and letting it supply the blocks `untouched`
    /// says are as they were; noting in `placements` the pieces written
    /// whole and where.
    fn render_into<'a>(
        &'a self,
        out: &mut Vec<u8>,
        cuts: &mut impl Cuts,
        untouched: impl Fn(&Label) -> bool,
        placements: Option<&Placements<'a>>,
    ) {
        self.render_model(out);
        out.extend_from_slice(b",\"machines\":");
        // Hosts block by block, each with its containers; a container
        // whose host is gone at the top, where its host would be.
        let mut machines = Members::open(out).noting(placements);
        let mut next = self.machines.keys().next().copied();
        while let Some(first) = next {
            let block = first.host_number() / BLOCK;
            // The first host of the next block, if there can be one.
            let end = block_end(block).map(MachineId::new);
            let in_block = match end {
                Some(end) => self.machines.range(first..end),
                None => self.machines.range(first..),
            };
            next = end.and_then(|end| self.machines.range(end..).next().map(|(id, _)| *id));
            let label = |first| Label::Machines { block, first };
            if machines.open_block(cuts, &untouched, label) {
                write_hosts(&mut machines, &self.machines, in_block);
            }
        }
        cuts.cut(machines.out, Label::MachinesEnd);
        machines.close();
        out.extend_from_slice(b",\"applications\":");
        let shown_principal = |name: &UnitName| {
            self.applications.contains_key(name.application())
                && self
                    .units
                    .get(name)
                    .is_some_and(|p| p.unit.principal.is_none())
        };
        let headers = self.headers();
        let mut applications = Members::open(out);
        for (name, header) in headers.iter() {
            cuts.cut(applications.out, Label::Application(name.clone()));
            let out = applications.key(name.as_str());
            // Its units, less the subordinates written under their
            // principals.
            let listed = |(_, piece): &(&UnitName, &UnitPiece)| {
                !piece.unit.principal.as_ref().is_some_and(&shown_principal)
            };
            if !self.units_of(name).any(|unit| listed(&unit)) {
                out.extend_from_slice(header.as_bytes());
                continue;
            }
            write_extended(
                out,
                header.as_bytes(),
                "units",
                Some(|out: &mut Vec<u8>| {
                    let mut units = Members::open(out).noting(placements);
                    let mut next = self.units_of(name).next().map(|(n, _)| n.number());
                    while let Some(first) = next {
                        let block = first / BLOCK;
                        let from = UnitName::new(name.clone(), first);
                        let end = block_end(block).map(|end| UnitName::new(name.clone(), end));
                        let in_block = match &end {
                            Some(end) => self.units.range(from..end.clone()),
                            None => self.units.range(from..),
                        };
                        next = end.and_then(|end| {
                            self.units
                                .range(end..)
                                .next()
                                .filter(|(n, _)| n.application() == name)
                                .map(|(n, _)| n.number())
                        });
                        let label = |first| Label::Units {
                            application: name.clone(),
                            block,
                            first,
                        };
                        if !units.open_block(cuts, &untouched, label) {
                            continue;
                        }
                        for (unit, piece) in in_block.filter(|unit| listed(unit)) {
                            let subordinates = self
                                .subordinates_of
                                .get(unit)
                                .into_iter()
                                .flatten()
                                .filter(|_| shown_principal(unit))
                                .filter_map(|s| self.units.get(s));
                            let subordinates = subordinates.map(|s| &s.member);
                            write_with_nested(
                                &mut units,
                                &piece.member,
                                "subordinates",
                                subordinates,
                            );
                        }
                    }
                    cuts.cut(units.out, Label::UnitsEnd(name.clone()));
                    units.close();
                }),
            );
        }
        cuts.cut(applications.out, Label::Tail);
        applications.close();
        out.push(b'}');
    }

    /// The part of the status `filter` selects, as JSON of the same shape
    /// as [`render`](Self::render) (see [`crate::status::filter`] for what
    /// a filter shows). It costs what it shows: machines are found by
    /// range and units by application or machine, never by a pass over
    /// the whole model.
    ///
    /// # Errors
    ///
    /// [`FilterError::NoApplication`] or [`FilterError::NoUnit`] when the
    /// filter names what the model does not have.
    pub fn render_filtered(&self, filter: &StatusFilter) -> Result<Vec<u8>, FilterError> {
        if filter.is_whole() {
            return Ok(self.render());
        }
        let units = self.select_units(filter)?;
        // The machines shown: those selected by range, or those the units
        // are on, with the hosts of containers.
        let mut machines: BTreeMap<MachineId, &MachinePiece> = BTreeMap::new();
        match (&filter.machines, filter.names_any()) {
            (Some(ranges), false) => {
                machines.extend(self.machines_numbered(ranges).map(|(id, p)| (*id, p)));
            }
            _ => {
                for piece in units.values() {
                    let Some(on) = piece.unit.machine else {
                        continue;
                    };
                    for id in [Some(on), on.parent()].into_iter().flatten() {
                        if let Some(machine) = self.machines.get(&id) {
                            machines.insert(id, machine);
                        }
                    }
                }
            }
        }
        let mut shown_applications: BTreeSet<&ApplicationName> =
            units.keys().map(|name| name.application()).collect();
        if filter.machines.is_none() {
            shown_applications.extend(filter.applications.iter());
        }
        let all_headers = self.headers();
        let headers = shown_applications
            .into_iter()
            .filter_map(|name| all_headers.get_key_value(name));

        let mut out = Vec::with_capacity(4096);
        self.render_model(&mut out);
        out.extend_from_slice(b",\"machines\":");
        render_machines(&machines, &mut out);
        out.extend_from_slice(b",\"applications\":");
        let shown_principal = |name: &UnitName| {
            self.applications.contains_key(name.application())
                && units.get(name).is_some_and(|p| p.unit.principal.is_none())
        };
        self.render_applications(
            &mut out,
            headers,
            units.iter().map(|(name, piece)| (*name, *piece)),
            shown_principal,
        );
        out.push(b'}');
        Ok(out)
    }

    /// The units `filter` selects, by name and by machine.
    fn select_units(
        &self,
        filter: &StatusFilter,
    ) -> Result<BTreeMap<&UnitName, &UnitPiece>, FilterError> {
        let mut units: BTreeMap<&UnitName, &UnitPiece> = BTreeMap::new();
        if filter.names_any() {
            for application in &filter.applications {
                if !self.applications.contains_key(application) {
                    return Err(FilterError::NoApplication(application.to_string()));
                }
                units.extend(self.units_of(application));
            }
            for name in &filter.units {
                let (name, piece) = self
                    .units
                    .get_key_value(name)
                    .ok_or_else(|| FilterError::NoUnit(name.to_string()))?;
                units.insert(name, piece);
            }
            // The subordinates of the principals selected.
            let principals: Vec<&UnitName> = units
                .iter()
                .filter(|(_, p)| p.unit.principal.is_none())
                .map(|(name, _)| *name)
                .collect();
            for principal in principals {
                for name in self.subordinates_of.get(principal).into_iter().flatten() {
                    if let Some((name, piece)) = self.units.get_key_value(name) {
                        units.insert(name, piece);
                    }
                }
            }
            if let Some(ranges) = &filter.machines {
                units.retain(|_, p| p.unit.machine.is_some_and(|m| ranges.holds(m)));
            }
        } else if let Some(ranges) = &filter.machines {
            for (machine, _) in self.machines_numbered(ranges) {
                for name in self.units_on.get(machine).into_iter().flatten() {
                    if let Some((name, piece)) = self.units.get_key_value(name) {
                        units.insert(name, piece);
                    }
                }
            }
        }
        Ok(units)
    }

    /// The machines, with their containers, whose numbers `ranges` hold,
    /// in id order: one range of the tree each.
    fn machines_numbered<'a>(
        &'a self,
        ranges: &'a MachineRanges,
    ) -> impl Iterator<Item = (&'a MachineId, &'a MachinePiece)> + 'a {
        ranges.ranges().iter().flat_map(|range| {
            let start = Bound::Included(MachineId::new(*range.start()));
            let end = match range.end().checked_add(1) {
                Some(next) => Bound::Excluded(MachineId::new(next)),
                None => Bound::Unbounded,
            };
            self.machines.range((start, end))
        })
    }

    /// `application`'s units, in order.
    fn units_of<'a>(
        &'a self,
        application: &ApplicationName,
    ) -> impl DoubleEndedIterator<Item = (&'a UnitName, &'a UnitPiece)> + 'a {
        let first = UnitName::new(application.clone(), 0);
        let last = UnitName::new(application.clone(), u64::MAX);
        self.units.range(first..=last)
    }

    /// `{"model":{...}`: the object's opening and the model.
    fn render_model(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"model\":");
        out.extend_from_slice(
            to_json(&model_view(
                &self.model,
                &self.cloud,
                self.revision,
                self.hourly_cost(),
            ))
            .as_bytes(),
        );
    }

    /// Each application's view without units, rendered: with its
    /// relations, the most severe status of all its units and what all
    /// their machines cost. Kept, and made again only for the applications
    /// changes have touched since, from their [`UnitsFold`]s, so a request
    /// after a small change does not fold every unit of the model again.
    fn headers(&self) -> Ref<'_, BTreeMap<ApplicationName, Box<str>>> {
        let stale = std::mem::take(&mut *self.stale_headers.borrow_mut());
        if !stale.is_empty() {
            // Every application's relations, which need all of them to
            // tell principals from subordinates; then only the stale ones.
            let mut views = application_headers(
                &self.applications.values().collect::<Vec<_>>(),
                &self.relations.values().collect::<Vec<_>>(),
            );
            if !stale.all {
                views.retain(|name, _| stale.applications.contains(name));
            }
            // Each stale application's fold of its units, kept as they
            // changed: what the machines its principal units are on cost,
            // once per machine (as `fold_application_cost` counts), and its
            // most severe workload status (the rule
            // `fold_application_status` follows).
            for (name, view) in &mut views {
                let Some(fold) = self.folds.get(name) else {
                    continue;
                };
                view.hourly_cost = view.hourly_cost + HourlyPrice::from_micro_usd(fold.cost);
                // The most severe unit, the later of equals: the search
                // from the end stops at the first of the worst rank.
                let most_severe = fold.worst().and_then(|worst| {
                    self.units_of(name)
                        .rev()
                        .find(|(_, piece)| piece.severity == worst)
                });
                if let Some((_, piece)) = most_severe {
                    view.application_status =
                        unit_view(&piece.unit, seen_on(&piece.unit, &self.machines))
                            .workload_status;
                }
            }
            let mut headers = self.headers.borrow_mut();
            if stale.all {
                headers.clear();
            }
            for name in &stale.applications {
                headers.remove(name);
            }
            headers.extend(
                views
                    .into_iter()
                    .map(|(name, header)| (name, to_json(&header))),
            );
        }
        self.headers.borrow()
    }

    /// Writes the applications `headers` (rendered, in name order) with
    /// `units` (in unit order) under them. A subordinate unit is written
    /// under its principal when `shown_principal` says that is written;
    /// otherwise among its own application's units.
    fn render_applications<'a>(
        &self,
        out: &mut Vec<u8>,
        headers: impl Iterator<Item = (&'a ApplicationName, &'a Box<str>)>,
        units: impl Iterator<Item = (&'a UnitName, &'a UnitPiece)>,
        shown_principal: impl Fn(&UnitName) -> bool,
    ) {
        // Trees, not hash maps: a unit's name is compared with a few
        // others instead of hashed.
        let mut by_application: BTreeMap<&ApplicationName, Vec<(&UnitName, &UnitPiece)>> =
            BTreeMap::new();
        let mut by_principal: BTreeMap<&UnitName, Vec<&UnitPiece>> = BTreeMap::new();
        for (name, piece) in units {
            match piece.unit.principal.as_ref().filter(|p| shown_principal(p)) {
                Some(principal) => by_principal.entry(principal).or_default().push(piece),
                None => by_application
                    .entry(name.application())
                    .or_default()
                    .push((name, piece)),
            }
        }
        let mut applications = Members::open(out);
        for (name, header) in headers {
            let units = by_application.get(name).map_or(&[][..], Vec::as_slice);
            let out = applications.key(name.as_str());
            let nested = (!units.is_empty()).then_some(|out: &mut Vec<u8>| {
                let mut members = Members::open(out);
                for (unit, piece) in units {
                    let subordinates = by_principal.get(unit).map_or(&[][..], Vec::as_slice);
                    let subordinates = subordinates.iter().map(|s| &s.member);
                    write_with_nested(&mut members, &piece.member, "subordinates", subordinates);
                }
                members.close();
            });
            write_extended(out, header.as_bytes(), "units", nested);
        }
        applications.close();
    }
}

/// The first number of the block after `block`, if numbers go that far.
fn block_end(block: u64) -> Option<u64> {
    block.checked_add(1)?.checked_mul(BLOCK)
}

/// Writes `member` with the `nested` members under it as `key` (left out
/// when there are none).
fn write_with_nested<'a>(
    members: &mut Members<'_, '_, 'a>,
    member: &'a Member,
    key: &str,
    nested: impl Iterator<Item = &'a Member>,
) {
    let mut nested = nested.peekable();
    if nested.peek().is_none() {
        members.push(member);
        return;
    }
    let placements = members.placements;
    member.with_parts(|member_key, value| {
        let out = members.raw_key(member_key);
        write_extended(
            out,
            value,
            key,
            Some(|out: &mut Vec<u8>| {
                let mut inner = Members::open(out).noting(placements);
                for one in nested {
                    inner.push(one);
                }
                inner.close();
            }),
        );
    });
}

/// The fewest machines or units whose pieces are made on more than one
/// thread.
const PIECES_IN_PARALLEL_AT_LEAST: usize = 16_384;

/// `make` of each of `items`, in order; on every core when there are many
/// (a whole read as a controller starts with a million machines makes two
/// million pieces, each a view rendered as JSON). `make` may take what it
/// needs out of an item; the items stay where they are.
fn make_pieces<T: Send, U: Send>(items: &mut [T], make: impl Fn(&mut T) -> U + Sync) -> Vec<U> {
    // The core count is read (a few system calls) only for a large
    // change, not for each of the small deltas a running deploy brings.
    let threads = if items.len() < PIECES_IN_PARALLEL_AT_LEAST {
        1
    } else {
        cores::count()
    };
    if threads == 1 {
        return items.iter_mut().map(make).collect();
    }
    let shares: Vec<&mut [T]> = items.chunks_mut(items.len().div_ceil(threads)).collect();
    let make = &make;
    cores::in_order(shares, |share| share.iter_mut().map(make).collect())
}

/// A few unit names in order: the units on one machine, or under one
/// principal. Most hold one name, so a sorted vector (one allocation of
/// the names themselves) rather than a tree, whose smallest node holds
/// room for eleven.
#[derive(Default)]
struct NameSet(Vec<UnitName>);

impl NameSet {
    fn insert(&mut self, name: UnitName) {
        if let Err(at) = self.0.binary_search(&name) {
            // A vector's first push makes room for four: room for one
            // is what most sets ever need.
            if self.0.capacity() == self.0.len() {
                self.0.reserve_exact(self.0.len().max(1));
            }
            self.0.insert(at, name);
        }
    }

    fn remove(&mut self, name: &UnitName) {
        if let Ok(at) = self.0.binary_search(name) {
            self.0.remove(at);
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'a> IntoIterator for &'a NameSet {
    type Item = &'a UnitName;
    type IntoIter = std::slice::Iter<'a, UnitName>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Takes `name` out of `key`'s set in `index`, and the set when empty.
fn forget<K: Ord>(index: &mut BTreeMap<K, NameSet>, key: &K, name: &UnitName) {
    if let Some(names) = index.get_mut(key) {
        names.remove(name);
        if names.is_empty() {
            index.remove(key);
        }
    }
}

/// Writes `machines` (in id order, a host's containers after it) as the
/// status's `machines` object: each container under its host when that is
/// among them, otherwise at the top.
fn render_machines<M: Borrow<MachinePiece>>(machines: &BTreeMap<MachineId, M>, out: &mut Vec<u8>) {
    let mut members = Members::open(out);
    write_hosts(&mut members, machines, machines.iter());
    members.close();
}

/// Writes the machines of `run` (in id order, from `machines`), each with
/// its containers under it; a container whose host is among `machines` is
/// left to its host.
fn write_hosts<'a, M: Borrow<MachinePiece> + 'a>(
    members: &mut Members<'_, '_, 'a>,
    machines: &'a BTreeMap<MachineId, M>,
    run: impl Iterator<Item = (&'a MachineId, &'a M)>,
) {
    for (id, piece) in run {
        if id.parent().is_some_and(|h| machines.contains_key(&h)) {
            continue; // under its host
        }
        let containers = machines
            .range((Bound::Excluded(*id), Bound::Unbounded))
            .take_while(|(c, _)| !id.is_container() && c.parent() == Some(*id))
            .map(|(_, c)| &c.borrow().member);
        write_with_nested(members, &piece.borrow().member, "containers", containers);
    }
}

/// Writes a JSON object's members one by one.
struct Members<'o, 'p, 'a> {
    out: &'o mut Vec<u8>,
    first: bool,
    /// Where to note the pieces written whole, when writing a rendering
    /// in segments.
    placements: Option<&'p Placements<'a>>,
}

impl<'o, 'p, 'a> Members<'o, 'p, 'a> {
    fn open(out: &'o mut Vec<u8>) -> Members<'o, 'p, 'a> {
        out.push(b'{');
        Members {
            out,
            first: true,
            placements: None,
        }
    }

    /// Notes the pieces [`push`](Self::push)ed in `placements`.
    fn noting(self, placements: Option<&'p Placements<'a>>) -> Members<'o, 'p, 'a> {
        Members { placements, ..self }
    }

    /// Writes the next member's key; the caller writes its value.
    fn key(&mut self, key: &str) -> &mut Vec<u8> {
        self.raw_key(format!("{}:", to_json(&key)).as_bytes())
    }

    /// Writes the next member's key, already rendered (`"key":`); the
    /// caller writes its value.
    fn raw_key(&mut self, rendered: &[u8]) -> &mut Vec<u8> {
        let out = self.next();
        out.extend_from_slice(rendered);
        out
    }

    /// Writes the comma before the next member, unless it is the first.
    fn next(&mut self) -> &mut Vec<u8> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        self.out
    }

    /// Writes a whole rendered member, noting where.
    fn push(&mut self, member: &'a Member) {
        let placements = self.placements;
        let out = self.next();
        let start = out.len();
        out.extend_from_slice(&member.text());
        if let Some(placements) = placements {
            placements.note(member, start..out.len());
        }
    }

    fn close(self) {
        self.out.push(b'}');
    }

    /// Starts the block of members that `label` names, given whether it
    /// comes first: when `untouched` says it is as it was and `cuts` takes
    /// it from the last rendering, `false` (the block is there, nothing to
    /// write); otherwise a cut before it and `true` (the caller writes it).
    fn open_block(
        &mut self,
        cuts: &mut impl Cuts,
        untouched: &impl Fn(&Label) -> bool,
        label: impl FnOnce(bool) -> Label,
    ) -> bool {
        let label = label(self.first);
        if untouched(&label) && cuts.reuse(self.out, &label) {
            self.first = false;
            return false;
        }
        cuts.cut(self.out, label);
        true
    }
}

/// Writes `object`, a rendered JSON object with at least one member, with
/// one more member `key` whose value `nested` writes; or `object` as it is
/// when `nested` is `None` (as serde leaves out an empty map).
fn write_extended(
    out: &mut Vec<u8>,
    object: &[u8],
    key: &str,
    nested: Option<impl FnOnce(&mut Vec<u8>)>,
) {
    match (object.strip_suffix(b"}"), nested) {
        (Some(open), Some(nested)) => {
            out.extend_from_slice(open);
            out.push(b',');
            out.extend_from_slice(to_json(&key).as_bytes());
            out.push(b':');
            nested(out);
            out.push(b'}');
        }
        _ => out.extend_from_slice(object),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::domain::constraints::Constraints;
    use crate::domain::machine::{Lifecycle, Machine, MachineRole};
    use crate::status::view::status_view;
    use crate::store::records::{MachineRecord, UnitRecord};

    /// A small deterministic generator (xorshift), so every case can be
    /// replayed from its seed.
    struct Dice(u64);

    impl Dice {
        fn roll(&mut self, sides: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % sides
        }

        fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
            &items[self.roll(items.len() as u64) as usize]
        }
    }

    const APPS: [&str; 4] = ["mysql", "wordpress", "ntp", "telegraf"];
    const WORKLOADS: [&str; 5] = ["waiting", "active", "blocked", "error", "maintenance"];

    fn machine(id: MachineId, dice: &mut Dice) -> MachineRecord {
        let state = *dice.pick(&MachineState::ALL);
        MachineRecord {
            id,
            base: "ubuntu@22.04".parse().unwrap(),
            constraints: if dice.roll(2) == 0 {
                Constraints::default()
            } else {
                Constraints::parse("mem=2G cores=2").unwrap()
            },
            placement: None,
            role: MachineRole::Workload,
            machine: Machine {
                state,
                lifecycle: Lifecycle {
                    instance_id: (dice.roll(2) == 0).then(|| format!("i-{id}")),
                    last_error: (dice.roll(3) == 0).then(|| "no capacity".to_string()),
                    ..Lifecycle::default()
                },
            },
            instance_type: (dice.roll(2) == 0).then(|| "m5.large".to_string()),
            hourly_price: (dice.roll(2) == 0).then(|| "0.096".parse().unwrap()),
            hardware: (dice.roll(2) == 0).then(|| "arch=amd64 cores=2".to_string()),
            awaiting_check_in: false,
            retry_at_ms: None,
            last_heartbeat_ms: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            addresses: if dice.roll(2) == 0 {
                vec![format!("192.0.2.{}", id.host_number() % 254 + 1)]
            } else {
                Vec::new()
            },
            // The store moves a machine's time only when its state moves.
            status_since_ms: 1_764_000_000_000
                + 60_000
                    * MachineState::ALL
                        .iter()
                        .position(|s| *s == state)
                        .unwrap_or(0) as i64,
            lease: None,
        }
    }

    fn application(name: &str) -> ApplicationRecord {
        ApplicationRecord {
            name: name.parse().unwrap(),
            charm_url: format!("ch:{name}-1"),
            base: "ubuntu@22.04".parse().unwrap(),
            constraints: Constraints::default(),
            subordinate: matches!(name, "ntp" | "telegraf"),
            settings: json!({}),
            life: "alive".to_string(),
            scale_with: None,
        }
    }

    fn relation(app1: &str, app2: &str, scope: &str) -> RelationRecord {
        RelationRecord {
            key: format!("{app1}:juju-info {app2}:juju-info"),
            app1: app1.into(),
            endpoint1: "juju-info".into(),
            app2: app2.into(),
            endpoint2: "juju-info".into(),
            interface: "juju-info".into(),
            scope: scope.into(),
        }
    }

    /// A snapshot with hosts, containers (some whose host is gone),
    /// principal and subordinate units (some whose principal or machine is
    /// gone), units of removed applications, and relations.
    fn snapshot(seed: u64) -> StatusSnapshot {
        let mut dice = Dice(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut machines = Vec::new();
        for host in 0..dice.roll(12) {
            if dice.roll(5) > 0 {
                machines.push(machine(MachineId::new(host), &mut dice));
            }
            for container in 0..dice.roll(3) {
                let id: MachineId = format!("{host}/lxd/{container}").parse().unwrap();
                machines.push(machine(id, &mut dice));
            }
        }
        let machine_ids: Vec<Option<MachineId>> = machines
            .iter()
            .map(|m| Some(m.id))
            .chain([None, Some(MachineId::new(99))])
            .collect();
        let applications: Vec<ApplicationRecord> = APPS
            .iter()
            .filter(|_| dice.roll(4) > 0)
            .map(|a| application(a))
            .collect();
        let mut units: Vec<UnitRecord> = Vec::new();
        for app in APPS.iter().take(2) {
            for number in 0..dice.roll(6) {
                let name = UnitName::new(app.parse().unwrap(), number);
                units.push(unit(name, *dice.pick(&machine_ids), None, &mut dice));
            }
        }
        let principals: Vec<UnitRecord> = units.clone();
        for app in &APPS[2..] {
            for number in 0..dice.roll(4) {
                let name = UnitName::new(app.parse().unwrap(), number);
                let principal = if principals.is_empty() || dice.roll(4) == 0 {
                    None
                } else {
                    Some(dice.pick(&principals).clone())
                };
                let machine = principal.as_ref().and_then(|p| p.machine);
                let principal_name = principal
                    .map(|p| p.name)
                    .or_else(|| (dice.roll(2) == 0).then(|| "mysql/77".parse().unwrap()));
                units.push(unit(name, machine, principal_name, &mut dice));
            }
        }
        let relations = [
            relation("ntp", "mysql", "container"),
            relation("telegraf", "wordpress", "container"),
            relation("wordpress", "mysql", "global"),
        ]
        .into_iter()
        .filter(|_| dice.roll(2) == 0)
        .collect();
        machines.sort_by_key(|m| m.id);
        units.sort_by(|a, b| a.name.cmp(&b.name));
        StatusSnapshot {
            revision: i64::try_from(seed).unwrap(),
            model: crate::store::records::ModelRecord {
                name: "default".into(),
                uuid: "model-uuid".into(),
                controller_uuid: "controller-uuid".into(),
                constraints: Constraints::default(),
            },
            machines,
            applications,
            units,
            relations,
            zones: Vec::new(),
        }
    }

    fn unit(
        name: UnitName,
        machine: Option<MachineId>,
        principal: Option<UnitName>,
        dice: &mut Dice,
    ) -> UnitRecord {
        let unset = dice.roll(3) > 0;
        UnitRecord {
            application: name.application().clone(),
            name,
            base: "ubuntu@22.04".parse().unwrap(),
            constraints: Constraints::default(),
            machine,
            principal,
            agent_status: if unset { "allocating" } else { "executing" }.to_string(),
            workload_status: if unset {
                "waiting".to_string()
            } else {
                dice.pick(&WORKLOADS).to_string()
            },
            created_at_ms: 1_764_000_000_000 + 1000 * dice.roll(600) as i64,
        }
    }

    fn rendered(document: &StatusDocument) -> Value {
        serde_json::from_slice(&document.render()).expect("the document renders valid JSON")
    }

    fn viewed(snapshot: &StatusSnapshot) -> Value {
        serde_json::to_value(status_view(snapshot, "sim")).unwrap()
    }

    /// What `filter` shows of `snapshot` by the rules `status::filter`
    /// states, cut from the whole status view: the reference the filtered
    /// rendering is held to.
    fn filtered_by_the_rules(
        snapshot: &StatusSnapshot,
        filter: &StatusFilter,
    ) -> Result<Value, FilterError> {
        let whole = viewed(snapshot);
        if filter.is_whole() {
            return Ok(whole);
        }
        let mut machine_views: BTreeMap<MachineId, Value> = BTreeMap::new();
        for (id, view) in whole["machines"].as_object().unwrap() {
            let mut view = view.clone();
            let containers = view.as_object_mut().unwrap().remove("containers");
            machine_views.insert(id.parse().unwrap(), view);
            for (id, view) in containers.iter().flat_map(|c| c.as_object().unwrap()) {
                machine_views.insert(id.parse().unwrap(), view.clone());
            }
        }
        let mut unit_views: BTreeMap<UnitName, Value> = BTreeMap::new();
        for application in whole["applications"].as_object().unwrap().values() {
            for (name, view) in application["units"].as_object().into_iter().flatten() {
                let mut view = view.clone();
                let subordinates = view.as_object_mut().unwrap().remove("subordinates");
                unit_views.insert(name.parse().unwrap(), view);
                for (name, view) in subordinates.iter().flat_map(|s| s.as_object().unwrap()) {
                    unit_views.insert(name.parse().unwrap(), view.clone());
                }
            }
        }
        let exists = |m: &MachineId| snapshot.machines.iter().any(|r| r.id == *m);
        let has_application =
            |a: &ApplicationName| snapshot.applications.iter().any(|r| r.name == *a);
        let record = |u: &UnitName| snapshot.units.iter().find(|r| r.name == *u);
        let in_range = |m: Option<MachineId>| {
            m.is_some_and(|m| filter.machines.as_ref().is_some_and(|r| r.holds(m)))
        };

        let mut units: BTreeSet<UnitName> = BTreeSet::new();
        if filter.names_any() {
            for a in &filter.applications {
                if !has_application(a) {
                    return Err(FilterError::NoApplication(a.to_string()));
                }
            }
            for u in &filter.units {
                if record(u).is_none() {
                    return Err(FilterError::NoUnit(u.to_string()));
                }
            }
            for r in &snapshot.units {
                if filter.applications.contains(&r.application) || filter.units.contains(&r.name) {
                    units.insert(r.name.clone());
                }
            }
            let principals: BTreeSet<UnitName> = units
                .iter()
                .filter(|u| record(u).unwrap().principal.is_none())
                .cloned()
                .collect();
            for r in &snapshot.units {
                if r.principal.as_ref().is_some_and(|p| principals.contains(p)) {
                    units.insert(r.name.clone());
                }
            }
            if filter.machines.is_some() {
                units.retain(|u| in_range(record(u).unwrap().machine));
            }
        } else {
            for r in &snapshot.units {
                if in_range(r.machine) && r.machine.is_some_and(|m| exists(&m)) {
                    units.insert(r.name.clone());
                }
            }
        }
        let machines: BTreeSet<MachineId> = if filter.machines.is_some() && !filter.names_any() {
            snapshot
                .machines
                .iter()
                .map(|r| r.id)
                .filter(|m| in_range(Some(*m)))
                .collect()
        } else {
            units
                .iter()
                .filter_map(|u| record(u).unwrap().machine)
                .flat_map(|m| [Some(m), m.parent()])
                .flatten()
                .filter(exists)
                .collect()
        };
        let mut applications: BTreeSet<ApplicationName> =
            units.iter().map(|u| u.application().clone()).collect();
        if filter.machines.is_none() {
            applications.extend(filter.applications.iter().cloned());
        }

        let mut machines_out = serde_json::Map::new();
        for id in &machines {
            if id.parent().is_some_and(|h| machines.contains(&h)) {
                continue;
            }
            let mut view = machine_views[id].clone();
            let containers: serde_json::Map<String, Value> = machines
                .iter()
                .filter(|c| c.parent() == Some(*id))
                .map(|c| (c.to_string(), machine_views[c].clone()))
                .collect();
            if !containers.is_empty() {
                view["containers"] = Value::Object(containers);
            }
            machines_out.insert(id.to_string(), view);
        }
        let nested_under = |u: &UnitName| {
            let principal = record(u)?.principal.clone()?;
            let shown = units.contains(&principal)
                && has_application(principal.application())
                && record(&principal)?.principal.is_none();
            shown.then_some(principal)
        };
        let mut applications_out = serde_json::Map::new();
        for a in applications.iter().filter(|a| has_application(a)) {
            let mut view = whole["applications"][a.as_str()].clone();
            view.as_object_mut().unwrap().remove("units");
            let mut units_out = serde_json::Map::new();
            for u in units.iter().filter(|u| u.application() == a) {
                if nested_under(u).is_some() {
                    continue;
                }
                let mut unit = unit_views[u].clone();
                let subordinates: serde_json::Map<String, Value> = units
                    .iter()
                    .filter(|s| nested_under(s).as_ref() == Some(u))
                    .map(|s| (s.to_string(), unit_views[s].clone()))
                    .collect();
                if !subordinates.is_empty() {
                    unit["subordinates"] = Value::Object(subordinates);
                }
                units_out.insert(u.to_string(), unit);
            }
            if !units_out.is_empty() {
                view["units"] = Value::Object(units_out);
            }
            applications_out.insert(a.to_string(), view);
        }
        Ok(json!({
            "model": whole["model"],
            "machines": machines_out,
            "applications": applications_out,
        }))
    }

    /// Filters of every kind over `snapshot`'s names and ids, with names
    /// the model does not have among them now and then.
    fn filters(snapshot: &StatusSnapshot, dice: &mut Dice) -> Vec<StatusFilter> {
        let mut out = Vec::new();
        for _ in 0..6 {
            let mut filter = StatusFilter::default();
            if dice.roll(2) == 0 {
                for _ in 0..=dice.roll(2) {
                    filter
                        .applications
                        .insert(dice.pick(&APPS).parse().unwrap());
                }
            }
            if dice.roll(3) == 0 && !snapshot.units.is_empty() {
                filter.units.insert(dice.pick(&snapshot.units).name.clone());
            }
            if dice.roll(10) == 0 {
                filter.units.insert("mysql/99".parse().unwrap());
            }
            if dice.roll(2) == 0 {
                let low = dice.roll(12);
                let text = format!("{low}-{},{}", low + dice.roll(4), dice.roll(12));
                filter.machines = Some(MachineRanges::parse(&text).unwrap());
            }
            out.push(filter);
        }
        out
    }

    #[test]
    fn a_filtered_document_renders_what_the_rules_cut_from_the_whole_status() {
        let mut shown_something = 0;
        for seed in 1..400 {
            let snapshot = snapshot(seed);
            let document = StatusDocument::of(&snapshot, "sim");
            let mut dice = Dice(seed | 1);
            for filter in filters(&snapshot, &mut dice) {
                let expected = filtered_by_the_rules(&snapshot, &filter);
                let got = document
                    .render_filtered(&filter)
                    .map(|body| serde_json::from_slice::<Value>(&body).unwrap());
                assert_eq!(got, expected, "seed {seed}, filter {}", filter.query());
                shown_something +=
                    usize::from(got.is_ok_and(|v| !v["machines"].as_object().unwrap().is_empty()));
            }
        }
        // The cases are not all empty ones.
        assert!(shown_something > 300, "{shown_something}");
    }

    #[test]
    fn headers_made_again_for_the_applications_a_change_touches_are_right() {
        let mut touched = 0;
        for seed in 1..300 {
            let mut previous = snapshot(seed);
            let mut document = StatusDocument::of(&previous, "sim");
            // Render once, so the headers are kept.
            assert_eq!(rendered(&document), viewed(&previous), "seed {seed}");
            let mut dice = Dice(seed | 1);
            for step in 0..4 {
                let mut next = previous.clone();
                next.revision += 1;
                // One unit's workload, or one machine's state and price:
                // applications and relations stay as they are.
                if dice.roll(2) == 0 && !next.units.is_empty() {
                    let at = dice.roll(next.units.len() as u64) as usize;
                    next.units[at].workload_status = dice.pick(&WORKLOADS).to_string();
                } else if !next.machines.is_empty() {
                    let at = dice.roll(next.machines.len() as u64) as usize;
                    next.machines[at].machine.state = *dice.pick(&MachineState::ALL);
                    next.machines[at].hourly_price =
                        (dice.roll(2) == 0).then(|| "0.5".parse().unwrap());
                }
                document.apply(delta(&previous, &next));
                touched += usize::from(!document.stale_headers.borrow().all);
                assert_eq!(
                    rendered(&document),
                    viewed(&next),
                    "seed {seed} step {step}"
                );
                previous = next;
            }
        }
        assert!(touched > 500, "{touched}");
    }

    #[test]
    fn a_document_renders_what_the_status_view_shows() {
        for seed in 1..400 {
            let snapshot = snapshot(seed);
            let document = StatusDocument::of(&snapshot, "sim");
            assert_eq!(rendered(&document), viewed(&snapshot), "seed {seed}");
        }
    }

    /// The delta a store would read going from `before` to `after`: every
    /// entity whose row differs, as it is after (or `None`).
    fn delta(before: &StatusSnapshot, after: &StatusSnapshot) -> StatusDelta {
        fn changed<K: Ord + Clone, R: Clone + PartialEq>(
            before: &[R],
            after: &[R],
            key: impl Fn(&R) -> K,
        ) -> Vec<(K, Option<R>)> {
            let old: BTreeMap<K, &R> = before.iter().map(|r| (key(r), r)).collect();
            let new: BTreeMap<K, &R> = after.iter().map(|r| (key(r), r)).collect();
            let keys: std::collections::BTreeSet<&K> = old.keys().chain(new.keys()).collect();
            keys.into_iter()
                .filter(|k| old.get(*k) != new.get(*k))
                .map(|k| ((*k).clone(), new.get(k).map(|r| (*r).clone())))
                .collect()
        }
        fn shown<K, R, S>(
            changed: Vec<(K, Option<R>)>,
            of: impl Fn(&R) -> S,
        ) -> Vec<(K, Option<S>)> {
            changed
                .into_iter()
                .map(|(k, r)| (k, r.as_ref().map(&of)))
                .collect()
        }
        StatusDelta {
            revision: after.revision,
            model: (before.model != after.model).then(|| after.model.clone()),
            machines: shown(
                changed(&before.machines, &after.machines, |m| m.id),
                MachineShown::of,
            ),
            applications: changed(&before.applications, &after.applications, |a| {
                a.name.clone()
            }),
            units: shown(
                changed(&before.units, &after.units, |u| u.name.clone()),
                UnitShown::of,
            ),
            relations: changed(&before.relations, &after.relations, |r| r.key.clone()),
        }
    }

    #[test]
    fn a_document_brought_forward_by_deltas_renders_the_newest_state() {
        for seed in 1..300 {
            let mut document = StatusDocument::of(&snapshot(seed), "sim");
            let mut previous = snapshot(seed);
            let mut segments = Arc::new(document.render_segments(None));
            for step in 1..4 {
                // Mostly the same entities, with other states and rows.
                let next_seed = seed + 1000 * step;
                let mut next = snapshot(next_seed);
                next.revision = previous.revision + 10;
                document.apply(delta(&previous, &next));
                assert_eq!(
                    rendered(&document),
                    viewed(&next),
                    "seed {seed} step {step}"
                );
                assert_eq!(document.revision(), next.revision);
                let cost: HourlyPrice = document
                    .machines
                    .values()
                    .filter_map(|m| m.hourly_price)
                    .sum();
                assert_eq!(document.hourly_cost(), cost, "seed {seed} step {step}");
                // In segments after the last rendering, the same bytes.
                segments = Arc::new(document.render_segments(Some(segments)));
                assert_eq!(
                    segments.to_vec(),
                    document.render(),
                    "seed {seed} step {step}"
                );
                previous = next;
            }
        }
    }

    /// `snapshot` with its host and unit numbers multiplied by `by`, so
    /// that its machines and units fall in several blocks.
    fn spread(mut snapshot: StatusSnapshot, by: u64) -> StatusSnapshot {
        let machine = |id: MachineId| -> MachineId {
            match id.container_number() {
                None => MachineId::new(id.host_number() * by),
                Some(c) => format!("{}/lxd/{c}", id.host_number() * by)
                    .parse()
                    .unwrap(),
            }
        };
        let unit = |name: &UnitName| UnitName::new(name.application().clone(), name.number() * by);
        for record in &mut snapshot.machines {
            record.id = machine(record.id);
        }
        for record in &mut snapshot.units {
            record.name = unit(&record.name);
            record.machine = record.machine.map(machine);
            record.principal = record.principal.as_ref().map(unit);
        }
        snapshot.machines.sort_by_key(|m| m.id);
        snapshot.units.sort_by(|a, b| a.name.cmp(&b.name));
        snapshot
    }

    /// Mostly `a`, with some of `b`'s entities in place of, beside or
    /// instead of `a`'s: a small change of any kind.
    fn mix(a: &StatusSnapshot, b: &StatusSnapshot, dice: &mut Dice) -> StatusSnapshot {
        fn pick<K: Ord + Clone, R: Clone>(
            a: &[R],
            b: &[R],
            key: impl Fn(&R) -> K,
            dice: &mut Dice,
            change: u64,
        ) -> Vec<R> {
            let mut out: BTreeMap<K, R> = a.iter().map(|r| (key(r), r.clone())).collect();
            for record in b {
                if dice.roll(change) == 0 {
                    out.insert(key(record), record.clone());
                }
            }
            let keys: Vec<K> = out.keys().cloned().collect();
            for k in keys {
                if dice.roll(change * 2) == 0 {
                    out.remove(&k);
                }
            }
            out.into_values().collect()
        }
        let mut next = a.clone();
        next.revision = a.revision + 1;
        next.machines = pick(&a.machines, &b.machines, |m| m.id, dice, 6);
        next.units = pick(&a.units, &b.units, |u| u.name.clone(), dice, 6);
        next.applications = pick(
            &a.applications,
            &b.applications,
            |x| x.name.clone(),
            dice,
            20,
        );
        next.relations = pick(&a.relations, &b.relations, |r| r.key.clone(), dice, 20);
        next
    }

    #[test]
    fn renderings_in_segments_after_small_changes_are_the_whole_status() {
        for seed in 1..200 {
            let mut dice = Dice(seed);
            let mut previous = spread(snapshot(seed), 150);
            let mut document = StatusDocument::of(&previous, "sim");
            let mut segments = Arc::new(document.render_segments(None));
            for step in 1..6 {
                let other = spread(snapshot(seed + 1000 * step), 150);
                let next = mix(&previous, &other, &mut dice);
                document.apply(delta(&previous, &next));
                let whole = document.render();
                assert_eq!(
                    serde_json::from_slice::<Value>(&whole).unwrap(),
                    viewed(&next),
                    "seed {seed} step {step}"
                );
                segments = Arc::new(document.render_segments(Some(segments)));
                assert!(segments.to_vec() == whole, "seed {seed} step {step}");
                previous = next;
            }
        }
    }

    #[test]
    fn the_last_numbers_there_are_render_in_blocks_of_their_own() {
        let mut model = large(3, 10);
        let last = MachineId::new(u64::MAX);
        model.machines.push(machine(last, &mut Dice(9)));
        let name = UnitName::new("wordpress".parse().unwrap(), u64::MAX);
        model.units.push(unit(name, Some(last), None, &mut Dice(4)));
        let document = StatusDocument::of(&model, "sim");
        let segments = document.render_segments(None);
        assert!(segments.to_vec() == document.render());
        assert_eq!(rendered(&document), viewed(&model));
    }

    /// A model of `n` machines, each with a unit of wordpress on it.
    fn large(n: u64, revision: i64) -> StatusSnapshot {
        let mut dice = Dice(5);
        let mut model = snapshot(1);
        model.revision = revision;
        model.machines = (0..n)
            .map(|i| {
                let mut record = machine(MachineId::new(i), &mut dice);
                record.machine.state = MachineState::Started;
                record
            })
            .collect();
        model.applications = vec![application("wordpress")];
        model.relations = Vec::new();
        model.units = (0..n)
            .map(|i| {
                let name = UnitName::new("wordpress".parse().unwrap(), i);
                unit(name, Some(MachineId::new(i)), None, &mut dice)
            })
            .collect();
        model
    }

    #[test]
    fn a_rendering_after_a_small_change_shares_every_segment_it_does_not_touch() {
        let n = 5 * BLOCK;
        let before = large(n, 10);
        let mut document = StatusDocument::of(&before, "sim");
        let first = Arc::new(document.render_segments(None));
        assert_eq!(first.to_vec(), document.render());

        // One machine changes state, and its unit is blocked (which its
        // application's status shows).
        let mut after = before.clone();
        after.revision += 1;
        let changed = usize::try_from(3 * BLOCK + 7).unwrap();
        after.machines[changed].machine.state = MachineState::Starting;
        after.units[changed].workload_status = "blocked".into();
        document.apply(delta(&before, &after));
        let second = document.render_segments(Some(Arc::clone(&first)));
        assert_eq!(second.to_vec(), document.render());
        assert_eq!(
            serde_json::from_slice::<Value>(&second.to_vec()).unwrap(),
            viewed(&after)
        );
        // The model (its revision moved) and the blocks of machine and
        // unit 1543 are new; the other 8 blocks, the header and the glue
        // between are shared.
        let wordpress: ApplicationName = "wordpress".parse().unwrap();
        assert_eq!(second.segments(), 15);
        assert_eq!(
            second.fresh_since(&first),
            [
                Label::Head,
                Label::Machines {
                    block: 3,
                    first: false
                },
                Label::Units {
                    application: wordpress,
                    block: 3,
                    first: false
                },
            ]
        );
    }

    /// How many of `document`'s machine and unit pieces hold their bytes
    /// within one of `rendering`'s segments.
    fn pieces_within(document: &StatusDocument, rendering: &Rendering) -> usize {
        let segments: Vec<Bytes> = rendering.pieces().collect();
        let machines = document.machines.values().map(|m| &m.member);
        let units = document.units.values().map(|u| &u.member);
        machines
            .chain(units)
            .filter(|member| {
                let text = member.text();
                segments
                    .iter()
                    .any(|s| s.as_ptr_range().contains(&text.as_ptr()))
            })
            .count()
    }

    #[test]
    fn pieces_written_into_a_rendering_share_its_bytes_until_they_change() {
        let n = 3 * BLOCK;
        let before = large(n, 10);
        let mut document = StatusDocument::of(&before, "sim");
        let pieces = usize::try_from(2 * n).unwrap();
        let first = Arc::new(document.render_segments(None));
        assert_eq!(pieces_within(&document, &first), pieces);

        // A machine changes state: its piece and its unit's are rendered
        // again with bytes of their own, until the next rendering.
        let mut after = before.clone();
        after.revision += 1;
        after.machines[7].machine.state = MachineState::Starting;
        document.apply(delta(&before, &after));
        assert_eq!(pieces_within(&document, &first), pieces - 2);
        let second = Arc::new(document.render_segments(Some(Arc::clone(&first))));
        assert_eq!(pieces_within(&document, &second), pieces);
        assert_eq!(second.to_vec(), document.render());

        // With no rendering left, the pieces still hold what they say.
        drop((first, second));
        assert_eq!(
            serde_json::from_slice::<Value>(&document.render()).unwrap(),
            viewed(&after)
        );
    }

    #[test]
    fn pieces_made_on_every_core_come_in_order() {
        for n in [
            0,
            1,
            PIECES_IN_PARALLEL_AT_LEAST - 1,
            3 * PIECES_IN_PARALLEL_AT_LEAST + 7,
        ] {
            let mut items: Vec<usize> = (0..n).collect();
            let made = make_pieces(&mut items, |i| (*i, std::thread::current().id()));
            let order: Vec<usize> = made.iter().map(|(i, _)| *i).collect();
            assert_eq!(order, (0..n).collect::<Vec<_>>(), "{n} items");
            let threads: HashSet<_> = made.iter().map(|(_, t)| *t).collect();
            let many = n >= PIECES_IN_PARALLEL_AT_LEAST && cores::count() > 1;
            assert_eq!(threads.len() > 1, many, "{n} items");
        }
    }

    #[test]
    fn trees_built_again_full_as_a_deploy_grows_them_render_the_same() {
        // Grown a thousand machines and units at a time, past the size at
        // which the trees are built again full.
        let mut previous = large(0, 1);
        let mut document = StatusDocument::of(&previous, "sim");
        let step = 1000;
        for k in 1..=6 {
            let next = large(k * step, previous.revision + 1);
            document.apply(delta(&previous, &next));
            previous = next;
        }
        assert!(document.packed.iter().all(|&n| n >= PACK_AT_LEAST));
        assert_eq!(rendered(&document), viewed(&previous));

        // Every unit waits but the last, which is blocked: its
        // application's status is that unit's, made again from the unit.
        let mut after = previous.clone();
        after.revision += 1;
        for unit in &mut after.units {
            unit.workload_status = "waiting".into();
        }
        after.units.last_mut().unwrap().workload_status = "blocked".into();
        document.apply(delta(&previous, &after));
        let shown = rendered(&document);
        assert_eq!(shown, viewed(&after));
        assert_eq!(
            shown["applications"]["wordpress"]["application-status"]["current"],
            "blocked"
        );
    }

    #[test]
    fn a_machine_state_change_alone_renders_its_units_again() {
        let mut before = snapshot(7);
        let host = MachineId::new(50);
        let mut dice = Dice(3);
        let mut record = machine(host, &mut dice);
        record.machine.state = MachineState::Starting;
        before.machines.push(record.clone());
        before.applications = vec![application("mysql")];
        before.units = vec![unit(
            "mysql/0".parse().unwrap(),
            Some(host),
            None,
            &mut Dice(2),
        )];
        before.units[0].agent_status = "allocating".into();
        before.units[0].workload_status = "waiting".into();
        let mut document = StatusDocument::of(&before, "sim");
        let unit = &rendered(&document)["applications"]["mysql"]["units"]["mysql/0"];
        assert_eq!(unit["workload-status"]["current"], "waiting");

        let mut after = before.clone();
        after.revision += 1;
        after.machines.last_mut().unwrap().machine.state = MachineState::Started;
        let change = delta(&before, &after);
        assert!(change.units.is_empty(), "only the machine changed");
        document.apply(change);
        let view = rendered(&document);
        assert_eq!(
            view["applications"]["mysql"]["units"]["mysql/0"]["juju-status"]["current"],
            "idle"
        );
        assert_eq!(view, viewed(&after));
    }

    #[test]
    fn the_document_counts_machines_by_state_as_they_change() {
        let count = |snapshot: &StatusSnapshot, state| {
            snapshot
                .machines
                .iter()
                .filter(|m| m.state() == state)
                .count()
        };
        for seed in 1..100 {
            let before = snapshot(seed);
            let mut after = snapshot(seed + 5000);
            after.revision = before.revision + 1;
            let mut document = StatusDocument::of(&before, "sim");
            document.apply(delta(&before, &after));
            for state in MachineState::ALL {
                assert_eq!(
                    document.machines_in(state),
                    count(&after, state),
                    "seed {seed}"
                );
            }
        }
    }

    /// Each application's fold counted afresh from every unit: its units
    /// by severity, and each machine its principal units are on priced
    /// once.
    fn folds_counted_whole(document: &StatusDocument) -> BTreeMap<String, (Vec<usize>, u64)> {
        let mut folds: BTreeMap<String, (Vec<usize>, u64)> = BTreeMap::new();
        let mut priced: BTreeSet<(String, MachineId)> = BTreeSet::new();
        for (name, piece) in &document.units {
            let application = name.application().to_string();
            let fold = folds
                .entry(application.clone())
                .or_insert_with(|| (vec![0; SEVERITIES], 0));
            fold.0[piece.severity] += 1;
            let price = piece
                .unit
                .machine
                .filter(|_| piece.unit.principal.is_none())
                .and_then(|m| Some((m, document.machines.get(&m)?.hourly_price?)));
            if let Some((machine, price)) = price {
                if priced.insert((application, machine)) {
                    fold.1 += price.micro_usd();
                }
            }
        }
        folds
    }

    #[test]
    fn application_folds_kept_through_changes_equal_a_count_of_every_unit() {
        let check = |document: &StatusDocument, label: &str| {
            let kept: BTreeMap<String, (Vec<usize>, u64)> = document
                .folds
                .iter()
                .map(|(name, fold)| (name.to_string(), (fold.severities.to_vec(), fold.cost)))
                .collect();
            // An application whose units all went keeps no fold.
            let whole: BTreeMap<_, _> = folds_counted_whole(document)
                .into_iter()
                .filter(|(_, (severities, cost))| *cost > 0 || severities.iter().any(|n| *n > 0))
                .collect();
            assert_eq!(kept, whole, "{label}");
        };
        for seed in 1..300 {
            let mut previous = snapshot(seed);
            let mut document = StatusDocument::of(&previous, "sim");
            check(&document, &format!("seed {seed}, read whole"));
            let mut dice = Dice(seed | 1);
            for step in 0..6 {
                let mut next = if step % 2 == 0 {
                    mix(&previous, &snapshot(seed + 1000 * (step + 1)), &mut dice)
                } else {
                    snapshot(seed + 1000 * (step + 1))
                };
                next.revision = previous.revision + 1;
                document.apply(delta(&previous, &next));
                check(&document, &format!("seed {seed} step {step}"));
                previous = next;
            }
        }
    }

    #[test]
    fn an_empty_model_renders_empty_sections() {
        let mut empty = snapshot(1);
        empty.machines.clear();
        empty.units.clear();
        empty.applications.clear();
        empty.relations.clear();
        let document = StatusDocument::of(&empty, "sim");
        assert!(document.is_empty());
        let view = rendered(&document);
        assert_eq!(view["machines"], json!({}));
        assert_eq!(view["applications"], json!({}));
        assert_eq!(view, viewed(&empty));
    }
}
