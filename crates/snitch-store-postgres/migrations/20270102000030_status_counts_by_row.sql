-- The kept counts by status (see the status_counts migration) moved by updates are now
-- counted only where an update changes a status, by a row-level trigger: the statement-
-- level one copied every updated row, old and new, for its transition tables, and most
-- updates never change a status (a check-in of a healthy snitch, a sweep's claim of its
-- lease). Inserts and deletes keep their statement-level triggers.
DROP TRIGGER snitches_counted_on_update ON snitch.snitches;

CREATE FUNCTION snitch.count_status_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO snitch.status_counts (status, n) VALUES (OLD.status, -1), (NEW.status, 1);
    RETURN NULL;
END
$$;

CREATE TRIGGER snitches_counted_on_status_change AFTER UPDATE OF status ON snitch.snitches
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION snitch.count_status_change();
