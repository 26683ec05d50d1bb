local function rsv(id) return 'rsv.' .. id end
