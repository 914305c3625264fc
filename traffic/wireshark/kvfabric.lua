-- Wireshark / tshark dissector for the kvfabric application header.
--
-- Every kvfabric message starts with a 44-byte header (network byte order,
-- struct "!HBBQqhHiQQ"; the layout is owned by traffic/wire.py and
-- mirrored by the scapy layer traffic/header.py, whose field names are used
-- here as "kvfabric.<name>"):
--
--   offset bytes field
--   0      2     magic 0x4B56 ("KV")
--   2      1     version (1)
--   3      1     kind (1 kv_transfer .. 9 probe)
--   4      8     flow_id, unsigned
--   12     8     request_id, signed (-1: none)
--   20     2     layer, signed (-1: none)
--   22     2     tenant, unsigned
--   24     4     chunk, signed (-1: none)
--   28     8     length: bytes of the message after the header
--   36     8     t_send_ns: sender's monotonic clock
--
-- Registered on TCP and UDP port 47000. Over TCP the messages are framed back
-- to back on a connection, so the TCP stream is split into messages with
-- tcp_dissect_pdus: several messages in one segment and a header (or payload)
-- split across segments both decode, provided the capture holds whole
-- segments (a snap length shorter than the packets stops reassembly).
--
-- Use:  tshark -X lua_script:traffic/wireshark/kvfabric.lua -r run.pcap -Y kvfabric
-- or copy this file into the per-user plugin folder (see README.md).

local HEADER_LEN = 44
local MAGIC = 0x4B56
local PORT = 47000

local kvfabric = Proto("kvfabric", "kvfabric KV message")

local KINDS = {
    [1] = "kv_transfer",
    [2] = "kv_layer",
    [3] = "token",
    [4] = "collective",
    [5] = "alltoall",
    [6] = "incast",
    [7] = "background",
    [8] = "cache_fetch",
    [9] = "probe",
    [10] = "tier_fetch",
}

local f = kvfabric.fields
f.magic = ProtoField.uint16("kvfabric.magic", "Magic", base.HEX)
f.version = ProtoField.uint8("kvfabric.version", "Version", base.DEC)
f.kind = ProtoField.uint8("kvfabric.kind", "Kind", base.DEC, KINDS)
f.flow_id = ProtoField.uint64("kvfabric.flow_id", "Flow id", base.DEC)
f.request_id = ProtoField.int64("kvfabric.request_id", "Request id", base.DEC)
f.layer = ProtoField.int16("kvfabric.layer", "Layer", base.DEC)
f.tenant = ProtoField.uint16("kvfabric.tenant", "Tenant", base.DEC)
f.chunk = ProtoField.int32("kvfabric.chunk", "Chunk", base.DEC)
f.length = ProtoField.uint64("kvfabric.length", "Payload length", base.DEC)
f.t_send_ns = ProtoField.uint64("kvfabric.t_send_ns", "Send time (ns, sender's clock)", base.DEC)
f.payload = ProtoField.bytes("kvfabric.payload", "Payload")

local function is_header(tvb, offset)
    return tvb:len() - offset >= 4
        and tvb(offset, 2):uint() == MAGIC
        and tvb(offset + 2, 1):uint() == 1
end

-- Fill the tree with the header at the start of `tvb` (one whole message).
local function dissect_message(tvb, pinfo, tree)
    local length = tvb(28, 8):uint64()
    local kind = tvb(3, 1):uint()
    local sub = tree:add(kvfabric, tvb(), "kvfabric " .. (KINDS[kind] or tostring(kind)))
    sub:add(f.magic, tvb(0, 2))
    sub:add(f.version, tvb(2, 1))
    sub:add(f.kind, tvb(3, 1))
    sub:add(f.flow_id, tvb(4, 8))
    sub:add(f.request_id, tvb(12, 8))
    sub:add(f.layer, tvb(20, 2))
    sub:add(f.tenant, tvb(22, 2))
    sub:add(f.chunk, tvb(24, 4))
    sub:add(f.length, tvb(28, 8))
    sub:add(f.t_send_ns, tvb(36, 8))
    if tvb:len() > HEADER_LEN then
        sub:add(f.payload, tvb(HEADER_LEN))
    end
    pinfo.cols.protocol = "KVFABRIC"
    sub:append_text(string.format(", flow %s, request %s, %s payload bytes",
        tostring(tvb(4, 8):uint64()), tostring(tvb(12, 8):int64()), tostring(length)))
    return tvb:len()
end

local function message_len(tvb, pinfo, offset)
    return HEADER_LEN + tvb(offset + 28, 8):uint64():tonumber()
end

local function dissect_tcp(tvb, pinfo, tree)
    -- Mid-message data at a segment start (a capture begun mid-connection) is
    -- not ours: return 0 so TCP shows it as data instead of a bogus header.
    if not is_header(tvb, 0) then
        return 0
    end
    return dissect_tcp_pdus(tvb, tree, HEADER_LEN, message_len, dissect_message)
end

local function dissect_udp(tvb, pinfo, tree)
    -- A datagram holds whole messages, back to back.
    local offset = 0
    while tvb:len() - offset >= HEADER_LEN and is_header(tvb, offset) do
        local total = HEADER_LEN + tvb(offset + 28, 8):uint64():tonumber()
        local take = math.min(total, tvb:len() - offset)
        dissect_message(tvb(offset, take):tvb(), pinfo, tree)
        offset = offset + take
    end
    return offset
end

-- The transports frame messages differently, so each gets its own entry point;
-- both fill the one "kvfabric" protocol's fields.
local kvfabric_tcp = Proto("kvfabric_tcp", "kvfabric over TCP")
kvfabric_tcp.dissector = dissect_tcp
local kvfabric_udp = Proto("kvfabric_udp", "kvfabric over UDP")
kvfabric_udp.dissector = dissect_udp

DissectorTable.get("tcp.port"):add(PORT, kvfabric_tcp)
DissectorTable.get("udp.port"):add(PORT, kvfabric_udp)
