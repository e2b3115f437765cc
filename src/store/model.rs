//! The model row: its identity and the model constraints.

use diesel::prelude::*;

use crate::domain::constraints::Constraints;
use crate::store::records::{stored, ModelRecord, ModelRow};
use crate::store::schema::model;
use crate::store::writer::Tx;
use crate::store::{ChangeKind, Conn, Entity, Store, StoreError};

/// The model a fresh store starts with.
pub const DEFAULT_MODEL_NAME: &str = "default";

/// The model row, read on `conn`.
pub(crate) fn read_model(conn: &mut Conn) -> Result<ModelRecord, StoreError> {
    let row: ModelRow = model::table
        .find(1)
        .select(ModelRow::as_select())
        .get_result(conn)?;
    row.try_into()
}

/// Creates the model row on first open; later opens keep it.
pub(crate) fn ensure_model(conn: &mut Conn) -> Result<(), StoreError> {
    let exists: i64 = model::table.count().get_result(conn)?;
    if exists == 0 {
        diesel::insert_into(model::table)
            .values((
                model::id.eq(1),
                model::name.eq(DEFAULT_MODEL_NAME),
                model::uuid.eq(uuid::Uuid::new_v4().to_string()),
                model::controller_uuid.eq(uuid::Uuid::new_v4().to_string()),
            ))
            .execute(conn)?;
    }
    Ok(())
}

pub(crate) fn model_constraints_tx(tx: &mut Tx<'_>) -> Result<Constraints, StoreError> {
    let text: String = model::table
        .find(1)
        .select(model::constraints)
        .get_result(tx.conn)?;
    stored("model constraints", &text)
}

impl Store {
    /// The model.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] or [`StoreError::Invariant`].
    pub fn model(&self) -> Result<ModelRecord, StoreError> {
        self.read(read_model)
    }

    /// `set-model-constraints`: replaces the model constraints. Existing
    /// units and machines keep the constraints they were made with.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] only.
    pub async fn set_model_constraints(&self, constraints: Constraints) -> Result<(), StoreError> {
        self.write(move |tx| {
            diesel::update(model::table.find(1))
                .set(model::constraints.eq(constraints.to_string()))
                .execute(tx.conn)?;
            tx.record(
                Entity::Model,
                "model",
                ChangeKind::Updated,
                format!("constraints={constraints}"),
            );
            Ok(())
        })
        .await
    }
}
