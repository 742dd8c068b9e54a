-- A contract's collisions are listed newest first by (arrival, id): the index by contract
-- now ends with the id too, so a page of one contract is read in its order from the
-- cursor on, like the whole log's (`event_collisions_by_tenant`), instead of through the
-- tenant's index filtering out every other contract's collisions (`plans::KEYSET_PAGES`).
DROP INDEX event_collisions_by_contract;
CREATE INDEX event_collisions_by_contract ON event_collisions (tenant_id, contract_name, received_at_us, collision_id);
