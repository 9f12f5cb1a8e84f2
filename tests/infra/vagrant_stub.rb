# Evaluates a Vagrantfile against a stub of Vagrant's configuration API that
# records every setting and call, and prints them as JSON (for tests/infra).
# Usage: ruby vagrant_stub.rb path/to/Vagrantfile
require "json"

class Recorder
  def initialize(path, log)
    @path = path
    @log = log
  end

  def method_missing(name, *args, **kw, &blk)
    name = name.to_s
    if name.end_with?("=")
      @log << { "set" => (@path + [name.chomp("=")]).join("."), "value" => args[0] }
      return args[0]
    end
    key = (@path + [name]).join(".")
    @log << { "call" => key, "args" => args, "kw" => kw.transform_keys(&:to_s) }
    blk&.call(Recorder.new(@path + [name] + args.map(&:to_s), @log))
    Recorder.new(@path + [name], @log)
  end

  def respond_to_missing?(*)
    true
  end
end

LOG = []

module Vagrant
  def self.configure(version)
    raise "unexpected configuration version #{version}" unless version == "2"
    yield Recorder.new([], LOG)
  end
end

load ARGV.fetch(0)
puts JSON.generate(LOG)
