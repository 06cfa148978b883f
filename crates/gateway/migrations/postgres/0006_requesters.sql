-- Every sender of the batch a run answers (JSON array of peer ids): each of them is a
-- requester of the run's approval prompts, not only the last one. NULL (rows from before):
-- the `requester` alone.
ALTER TABLE routes ADD COLUMN requesters TEXT;
ALTER TABLE approvals ADD COLUMN requesters TEXT;
