-- Hourly budgets in US dollars ("12.5"), for the model and for each
-- application: a command whose plan would cost more an hour is refused.
-- NULL: no budget.
ALTER TABLE model ADD COLUMN hourly_budget TEXT;
ALTER TABLE applications ADD COLUMN hourly_budget TEXT;
