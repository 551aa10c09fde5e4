-- The ledger's balance rule, checked once per INSERT statement instead of once per entry at COMMIT.
--
-- Migration 2 checked it with a deferred row-level constraint trigger: at COMMIT, one PL/pgSQL call and one
-- `sum(amount)` query per inserted entry — three per captured payment. Measured with pgbench on this schema
-- (30 postings, 90 entries per statement, one client): 2.26 ms per statement with that trigger, 1.50 ms with the
-- statement-level check below, 1.62 ms with no check at all: the deferred check was a third of the posting.
--
-- The new rule is stricter, not weaker: every INSERT statement into `ledger_entries` must add, for each ledger
-- transaction it touches, entries that sum to zero. The ledger is append-only (UPDATE, DELETE and TRUNCATE are
-- refused), and every transaction balanced before this migration (the deferred trigger saw to it), so by
-- induction each transaction's total stays zero: a transaction's sum only ever changes by a statement's
-- additions, and those sum to zero. The only writer (`hookline-worker`'s `payments::ledger`) writes a posting
-- and all its entries in one statement; entries inserted one by one, balanced only at COMMIT, are now refused.
DROP TRIGGER ledger_entries_balanced ON ledger_entries;
DROP FUNCTION ledger_check_balanced();

CREATE FUNCTION ledger_check_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE bad RECORD;
BEGIN
    SELECT transaction_id, sum(amount) AS total INTO bad
      FROM added_entries GROUP BY transaction_id HAVING sum(amount) <> 0 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger transaction % does not balance (entries added by one statement sum to %)',
            bad.transaction_id, bad.total
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER ledger_entries_balanced
    AFTER INSERT ON ledger_entries
    REFERENCING NEW TABLE AS added_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_check_balanced();
